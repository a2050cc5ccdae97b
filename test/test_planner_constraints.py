"""The planner names each task's answer language to the decoder; with the default settings
plans and detections are constrained, and every plan of an untrained model parses."""
from dataclasses import replace

import numpy as np
import pytest

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.constraints.automaton import LanguageError
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import Observation, Planner, PlannerConfig

CALLS: list[tuple] = []
IMAGE = np.zeros((36, 64, 3), np.uint8)


@pytest.fixture(scope="module")
def model():
    return Wamdiff2Model.from_preset("tiny", block_size=32, seed=0)


class RecordingEngine(DecodingEngine):
    """The fast engine, noting the constraint setting and the language of each call."""

    def decode(self, batch, cfg, language=None):
        CALLS.append((cfg.constrained, language))
        return super().decode(batch, cfg, language)


@pytest.fixture(scope="module")
def engine(model):
    return RecordingEngine(model)


def test_each_task_names_its_language(model, engine):
    planner = Planner(model, PlannerConfig(DecodeConfig(steps_per_block=4)), engine=engine)
    CALLS.clear()
    plan = planner.plan(Observation([IMAGE], "left", (5.0, 0.0)))   # untrained, yet a plan
    assert tasks.format_waypoints(plan.waypoints) == plan.text
    try:
        planner.detect([IMAGE])
    except tasks.AnswerParseError as exc:          # only the corner order can be wrong
        assert "x1 <= x2 and y1 <= y2" in exc.reason
    planner.answer([IMAGE], "Is the left lane free?")
    yes_no = planner.answer([IMAGE], "Is the left lane free?", choices=["yes", "no"])
    assert yes_no.text in ("yes", "no")
    assert CALLS == [(None, tasks.planning_language()), (None, tasks.detection_language()),
                     (None, None), (None, tasks.qa_language(["yes", "no"]))]

    always = planner.reconfigure(
        replace(planner.config, decode=replace(planner.decode, constrained=True)))
    CALLS.clear()
    always.answer([IMAGE], "Is the left lane free?")
    assert CALLS == [(True, tasks.qa_language())]


def test_the_plan_envelope_speed_is_the_planners_and_survives_reconfigure(model,
                                                                         engine):
    slow = Planner(model, PlannerConfig(DecodeConfig(steps_per_block=4), plan_max_speed=2.0),
                   engine=engine)
    CALLS.clear()
    plan = slow.plan(Observation([IMAGE], "straight", (5.0, 0.0)))   # untrained: any numbers
    assert CALLS == [(None, tasks.planning_language(2.0))]
    seconds = np.ceil(np.arange(1, 9) * 0.5)[:, None]
    assert (np.abs(plan.waypoints) <= np.floor(2.0 * seconds) + 0.99 + 1e-9).all()
    again = slow.reconfigure(
        replace(slow.config, decode=replace(slow.decode, steps_per_block=8)))
    assert again.plan_max_speed == 2.0 and again.plan_language == tasks.planning_language(2.0)
    wide = slow.reconfigure(replace(slow.config, plan_max_speed=None))
    assert wide.plan_language == tasks.planning_language(max_speed=None)
    with pytest.raises(ValueError, match="max_speed"):
        Planner(model, PlannerConfig(DecodeConfig(steps_per_block=4), plan_max_speed=0.0),
                engine=engine)


def test_the_switch_turns_it_off_and_a_short_budget_is_refused(model, engine):
    off = Planner(model, PlannerConfig(DecodeConfig(constrained=False, steps_per_block=4,
                                                    max_new_tokens=96)), engine=engine)
    CALLS.clear()
    try:
        off.plan(Observation([IMAGE]))
    except tasks.AnswerParseError:
        pass
    assert CALLS == [(False, tasks.planning_language())]
    with pytest.raises(LanguageError, match="takes 80 tokens .* max_new_tokens is 32"):
        Planner(model, PlannerConfig(DecodeConfig(max_new_tokens=32)))
    # a planning budget of its own is what counts
    Planner(model, PlannerConfig(DecodeConfig(max_new_tokens=32),
                                 plan_decode=DecodeConfig(max_new_tokens=96)))
