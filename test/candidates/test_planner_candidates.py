"""The bundled model's planner with K candidates: row 0 is the plan without candidates, every
candidate is a well-formed plan (constrained), K = 1 plans as before, bad settings are
refused up front, and the scorer plans a simulated frame whose ground truth is absent."""
import numpy as np
import pytest

from wamdiff2_core.candidates import CandidateConfig, CandidateConfigError
from wamdiff2_core.planner import Observation, Planner, PlannerConfig
from wamdiff2_core.sim.candidate_planners import candidates_planner
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, capture_frame
from wamdiff2_core.sim.planners import SimObservation
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.world import World
from wamdiff2_core.tasks import format_waypoints


@pytest.fixture(scope="module")
def frame():
    world = World("highway", 2001, ego="controlled")
    config = ClosedLoopConfig()
    renderer = CameraRenderer(config.camera, world.lanes)
    try:
        return capture_frame(world, renderer, config).observation
    finally:
        renderer.close()


@pytest.fixture(scope="module")
def plain():
    return Planner.from_pretrained(None)


@pytest.fixture(scope="module")
def four(plain):
    return plain.reconfigure(PlannerConfig(candidates=CandidateConfig(k=4, scorer="rules",
                                                                  seed=1)))


def _public(obs) -> Observation:
    return Observation(images=obs.images, command=obs.command, velocity=obs.velocity,
                       acceleration=obs.acceleration)


def test_row_zero_is_the_plan_without_candidates(plain, four, frame):
    one = plain.plan(_public(frame))
    result = four.plan(_public(frame))
    cset = result.candidates
    assert len(cset) == 4 and cset.candidates[0].text == one.text
    assert [c.temperature for c in cset.candidates] == [0.0, 0.7, 0.7, 0.7]
    assert all(c.valid and c.text == format_waypoints(c.waypoints) for c in cset.candidates)
    tokens = [len(four.model.processor.encode_text(c.text)) for c in cset.candidates]
    assert [len(c.confidences) for c in cset.candidates] == tokens
    assert all(0.0 < p <= 1.0 for c in cset.candidates for p in c.confidences)
    chosen = cset.candidates[cset.selection.chosen]
    assert result.text == chosen.text and np.array_equal(result.waypoints, chosen.waypoints)
    assert cset.selection.scorer == "rules" and not cset.selection.fallback
    assert result.stats.batch == 4


def test_one_candidate_plans_as_before(plain, frame):
    same = plain.reconfigure(PlannerConfig(candidates=CandidateConfig(k=1,
                                                                  scorer="confidence")))
    assert same.picker is None and same.plan(_public(frame)).candidates is None
    assert same.plan(_public(frame)).text == plain.plan(_public(frame)).text
    with pytest.raises(ValueError, match="one plan per frame"):
        same.plan_candidates(_public(frame))


def test_a_learned_scorer_without_weights_is_refused_up_front(plain, tmp_path):
    with pytest.raises(CandidateConfigError, match="needs a weights file"):
        plain.reconfigure(PlannerConfig(candidates=CandidateConfig(k=4, scorer="learned")))
    with pytest.raises(CandidateConfigError, match="missing.json does not exist"):
        plain.reconfigure(PlannerConfig(candidates=CandidateConfig(k=4, scorer="learned"),
                                        scorer_weights=tmp_path / "missing.json"))


class Absent:
    """Ground truth that is not there: any use of it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"the planner read ground truth ({name})")

    def __array__(self, *args, **kwargs):
        raise AssertionError("the planner read ground truth (as an array)")

    def __call__(self, *args, **kwargs):
        raise AssertionError("the planner called the oracle")

    def __iter__(self):
        raise AssertionError("the planner read ground truth (iterated)")


def test_the_scorer_plans_a_frame_whose_ground_truth_is_absent(four, frame):
    blind = SimObservation(images=frame.images, command=frame.command,
                           velocity=frame.velocity, acceleration=frame.acceleration,
                           stamp=frame.stamp, expert_waypoints=Absent(), oracle=Absent())
    seeing = SimObservation(images=frame.images, command=frame.command,
                            velocity=frame.velocity, acceleration=frame.acceleration,
                            stamp=frame.stamp, expert_waypoints=frame.expert_waypoints,
                            oracle=frame.oracle)
    result = candidates_planner(four, "scorer")(blind, None)
    assert result.text == candidates_planner(four, "scorer")(seeing, None).text


def test_the_default_scorer_runs_on_the_bundled_model(plain, frame):
    """K > 1 with every other setting left out plans with the bundled model as shipped (it has
    no learned-scorer weights file)."""
    result = plain.reconfigure(PlannerConfig(candidates=CandidateConfig(k=4))).plan(
        _public(frame))
    selection = result.candidates.selection
    assert selection.scorer == CandidateConfig().scorer and not selection.fallback


def test_each_frame_draws_its_own_candidates_from_its_stamp(four, frame):
    """The sampled rows are seeded by the frame's stamp: the same frame twice gives the same
    candidates, another stamp other noise; a frame without a stamp keeps the fixed seed."""
    def texts(stamp):
        obs = Observation(images=frame.images, command=frame.command,
                          velocity=frame.velocity, acceleration=frame.acceleration,
                          stamp=stamp)
        return [c.text for c in four.plan(obs).candidates.candidates]

    at_one = texts(1.0)
    assert texts(1.0) == at_one
    later = texts(1.5)
    assert later[0] == at_one[0] and later[1:] != at_one[1:]    # row 0 is greedy either way
    unstamped = texts(None)
    assert unstamped == texts(None)
    assert four.candidates.frame_seed(None) == four.candidates.seed == 1
