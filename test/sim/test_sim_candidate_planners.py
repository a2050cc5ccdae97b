"""The closed loop's candidates planner: the planner gets a plain Observation (nothing
privileged), the oracle and greedy choices are report-only drives, the log says what was
chosen."""
import numpy as np
import pytest

from wamdiff2_core.candidates import Candidate, CandidateSet, Selection
from wamdiff2_core.sim.candidate_oracle import CandidateOutcome
from wamdiff2_core.sim.candidate_planners import CandidateLog, candidates_planner
from wamdiff2_core.sim.planners import SimObservation
from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.types import Observation

T = np.arange(1, 9)[:, None] * 0.5


class Candidates:
    """A planner that answers three fixed candidates and chooses candidate 1."""

    def __init__(self, broken: bool = False):
        self.seen = []
        self.broken = broken

    def plan_candidates(self, observation):
        self.seen.append(observation)
        plans = [np.hstack([T * v, T * 0]) for v in (10.0, 8.0, 12.0)]
        cands = [Candidate(p, f"plan {i}", "straight", 0.0 if i == 0 else 0.7, (0.9,))
                 for i, p in enumerate(plans)]
        if self.broken:
            cands[1] = Candidate(None, "junk", "straight", 0.7, (0.1,), "not numbers")
        return CandidateSet(cands, Selection("rules", [0.1, 0.5, 0.2], 1, 0.3))


def observation(oracle=None):
    return SimObservation(images=[np.zeros((4, 4, 3), np.uint8)], command="straight",
                          velocity=(10.0, 0.0), stamp=1.5, expert_waypoints=T * [8.5, 0.0],
                          oracle=oracle)


def outcomes(candidates):
    """Privileged outcomes: the slowest candidate is the best."""
    return [CandidateOutcome(1.0, 1.0, 1.0 - c[-1, 0] / 100, 1.0, 1.0) for c in candidates]


def test_the_planner_sees_no_privileged_field():
    planner = Candidates()
    result = candidates_planner(planner)(observation(outcomes), None)
    (seen,) = planner.seen
    assert type(seen) is Observation
    assert not hasattr(seen, "expert_waypoints") and not hasattr(seen, "oracle")
    assert seen.command == "straight" and seen.velocity == (10.0, 0.0) and seen.stamp == 1.5
    assert result.text == "plan 1"                       # the scorer's choice


@pytest.mark.parametrize("choice, text", [("oracle", "plan 1"), ("greedy", "plan 0")])
def test_report_only_choices(choice, text):
    log = CandidateLog()
    plan = candidates_planner(Candidates(), choice, log)
    assert plan(observation(outcomes), None).text == text
    summary = log.summary()
    assert summary["frames"] == 1 and summary["not_greedy"] == (choice == "oracle")
    if choice == "oracle":
        assert summary["oracle_score"]["chosen"] == summary["oracle_score"]["best"]
        assert len(log.frames[0]["features"]) == 3


def test_labels_come_with_features_and_the_l2_to_the_expert():
    log = CandidateLog()
    candidates_planner(Candidates(), "scorer", log, label=True)(observation(outcomes), None)
    frame = log.frames[0]
    scores = [o["score"] for o in frame["oracle"]]
    assert scores[1] == max(scores) and len(frame["features"]) == 3
    assert frame["chosen"] == 1 and frame["l2_chosen_m"] < frame["l2_greedy_m"]


def test_oracle_needs_the_simulator():
    with pytest.raises(ValueError, match="closed loop only"):
        candidates_planner(Candidates(), "oracle")(observation(None), None)
    with pytest.raises(ValueError, match="unknown candidate choice"):
        candidates_planner(Candidates(), "best")


def test_an_unparsed_choice_is_a_parse_failure():
    with pytest.raises(AnswerParseError, match="not numbers"):
        candidates_planner(Candidates(broken=True))(observation(outcomes), None)
