"""Run-time scorers on hand-made candidate sets: what each prefers, and that a failure
falls back to the most confident candidate and says so."""
import math

import numpy as np
import pytest

from wamdiff2_core.candidates import (FEATURES, Candidate, CandidateSet, ScoringContext,
                                      feature_matrix)
from wamdiff2_core.candidates.config import CandidateConfigError, Row
from wamdiff2_core.candidates.decode import decode_candidates, parse_candidate
from wamdiff2_core.candidates.features import kinematics
from wamdiff2_core.candidates.scorers import SCORERS, make_scorer, select
from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.tasks import format_waypoints

T = np.arange(1, 9) * 0.5


def straight(speed: float, decel: float = 0.0, lateral: float = 0.0) -> np.ndarray:
    x = speed * T - 0.5 * decel * T ** 2
    return np.stack([x, lateral * T / T[-1]], axis=1)


def cand(waypoints, conf=0.9, temperature=0.7, command="straight"):
    return Candidate(waypoints, format_waypoints(waypoints) if waypoints is not None else "x",
                     command, temperature, (conf,) * 10)


CONTEXT = ScoringContext("straight", (10.0, 0.0))


def test_kinematics_of_a_steady_plan():
    kin = kinematics(straight(10.0), (10.0, 0.0))
    assert np.allclose(kin.speeds, 10.0) and np.allclose(kin.accels, 0.0)
    assert np.allclose(kin.yaw_rates, 0.0) and kin.comfort_ok()
    assert not kinematics(straight(10.0, decel=5.0), (10.0, 0.0)).comfort_ok()


def test_features_are_named_and_nan_for_unparsed():
    cset = CandidateSet([cand(straight(10.0), temperature=0.0), cand(None),
                         cand(straight(9.0))])
    features = feature_matrix(cset, CONTEXT)
    assert features.shape == (3, len(FEATURES))
    assert np.isnan(features[1]).all() and np.isfinite(features[[0, 2]]).all()
    assert features[0, FEATURES.index("greedy")] == 1.0


def test_confidence_prefers_the_most_confident():
    cset = CandidateSet([cand(straight(10.0), 0.5), cand(straight(9.0), 0.95),
                         cand(straight(11.0), 0.7)])
    selection = select(cset, CONTEXT, "confidence", SCORERS["confidence"])
    assert selection.chosen == 1 and selection.margin > 0 and not selection.fallback


def test_consensus_prefers_the_plan_the_others_agree_with():
    cset = CandidateSet([cand(straight(14.0)), cand(straight(10.0)), cand(straight(10.3)),
                         cand(straight(9.8)), cand(straight(5.0))])
    assert select(cset, CONTEXT, "consensus", SCORERS["consensus"]).chosen == 1


def test_rules_put_an_uncomfortable_plan_last():
    cset = CandidateSet([cand(straight(10.0, decel=6.0), 0.99), cand(straight(9.5), 0.6)])
    selection = select(cset, CONTEXT, "rules", SCORERS["rules"])
    assert selection.chosen == 1 and selection.scores[0] < selection.scores[1]


def test_a_failing_scorer_falls_back_to_the_most_confident_and_says_so():
    def broken(features, cset, context):
        raise RuntimeError("weights missing")
    cset = CandidateSet([cand(straight(10.0), 0.5), cand(straight(9.0), 0.95)])
    selection = select(cset, CONTEXT, "learned", broken)
    assert selection.chosen == 1
    assert "scorer learned failed" in selection.fallback and "weights missing" in \
        selection.fallback and "most confident" in selection.fallback


def test_confidence_without_confidences_is_a_failure_not_a_guess():
    cset = CandidateSet([Candidate(straight(10.0), "", "straight", 0.0),
                         Candidate(straight(9.0), "", "straight", 0.7)])
    selection = select(cset, CONTEXT, "confidence", SCORERS["confidence"])
    assert "no token confidences" in selection.fallback and selection.chosen == 0


def test_an_unparsed_candidate_is_never_chosen():
    cset = CandidateSet([cand(None, 0.99), cand(straight(9.0), 0.1)])
    for name, scorer in SCORERS.items():
        assert select(cset, CONTEXT, name, scorer).chosen == 1, name
    nothing = select(CandidateSet([cand(None)]), CONTEXT, "rules", SCORERS["rules"])
    assert nothing.fallback == "no candidate parsed" and nothing.chosen == 0
    assert math.isnan(nothing.margin)


def test_decode_candidates_is_one_batch_and_keeps_bad_answers():
    calls = []

    def decode_rows(prompts, images, temperatures):
        calls.append((tuple(prompts), tuple(temperatures)))
        texts = ["oops" if t else format_waypoints(straight(10.0)) for t in temperatures]
        return texts, [(0.9,)] * len(prompts), DecodeStats(tokens=10, batch=len(prompts))

    rows = (Row("left", 0.0), Row("left", 0.7), Row("right", 0.0))
    cset = decode_candidates(decode_rows, lambda c: f"go {c}", ["img"], rows)
    assert calls == [(("go left", "go left", "go right"), (0.0, 0.7, 0.0))]
    assert [c.valid for c in cset.candidates] == [True, False, True]
    assert cset.candidates[2].command == "right" and cset.candidates[1].error
    assert cset.stats.tokens == 10 and cset.stats.batch == 3
    assert parse_candidate("1,2", Row("left", 0.0)).error


def test_scorers_are_built_or_refused_with_the_reason(tmp_path):
    assert make_scorer("rules") is SCORERS["rules"]
    with pytest.raises(CandidateConfigError, match="needs a weights file"):
        make_scorer("learned")
    with pytest.raises(CandidateConfigError, match="none.json does not exist"):
        make_scorer("learned", tmp_path / "none.json")
    with pytest.raises(CandidateConfigError, match="unknown candidate scorer 'oracle'"):
        make_scorer("oracle")
