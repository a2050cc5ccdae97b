"""The learned scorer: the fit recovers a within-frame ranking; weights files round-trip
and bad ones are refused with the reason."""
import json

import numpy as np
import pytest

from wamdiff2_core.candidates.features import FEATURES
from wamdiff2_core.candidates.learned import LinearScorer, ScorerWeightsError, fit


def _data(frames=40, k=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(frames * k, len(FEATURES)))
    groups = np.repeat(np.arange(frames), k)
    offset = np.repeat(rng.normal(scale=5.0, size=frames), k)   # scene difficulty
    y = 2.0 * x[:, 0] - x[:, 3] + offset + rng.normal(scale=0.05, size=len(x))
    return x, y, groups


def test_fit_ranks_candidates_inside_a_frame():
    x, y, groups = _data()
    scorer = fit(x, y, groups, ridge=0.1)
    agree = [np.argmax(scorer.predict(x[groups == g])) == np.argmax(y[groups == g])
             for g in np.unique(groups)]
    assert np.mean(agree) > 0.95


def test_weights_round_trip(tmp_path):
    x, y, groups = _data()
    scorer = fit(x, y, groups, info={"data": "test"})
    again = LinearScorer.load(scorer.save(tmp_path / "w.json"))
    assert np.allclose(again.predict(x), scorer.predict(x), atol=1e-5)
    assert again.info["data"] == "test" and again.info["frames"] == 40


@pytest.mark.parametrize("content, words", [
    ("not json", "is not valid JSON"), ('{"format": "other"}', "not a candidate scorer"),
    (json.dumps({"format": "wamdiff2-candidate-scorer/1", "features": ["a"]}),
     "fitted on features"),
])
def test_bad_weights_files_are_refused(tmp_path, content, words):
    path = tmp_path / "w.json"
    path.write_text(content)
    with pytest.raises(ScorerWeightsError, match=words):
        LinearScorer.load(path)


def test_non_finite_weights_are_refused(tmp_path):
    x, y, groups = _data()
    data = fit(x, y, groups).to_json()
    data["weights"][0] = float("nan")
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScorerWeightsError, match="NaN, which is not a finite number"):
        LinearScorer.load(path)
    with pytest.raises(ScorerWeightsError, match="does not exist"):
        LinearScorer.load(tmp_path / "missing.json")


def _good(tmp_path) -> dict:
    x, y, groups = _data()
    return fit(x, y, groups).to_json()


@pytest.mark.parametrize("field, value, words", [
    ("centre", {"a": 1}, "centre must be a list of"),
    ("features", 5, "fitted on features 5"),
    ("scale", ["1"] * len(FEATURES), "scale must be a list of"),
    ("weights", [1.0] * (len(FEATURES) - 1), "weights must be a list of"),
    ("weights", [True] * len(FEATURES), "weights must be a list of"),
    ("scale", [0.0] * len(FEATURES), "scale must be > 0"),
    ("greedy_bonus", "abc", "greedy_bonus must be a finite number"),
    ("info", [1], "info must be a mapping"),
])
def test_malformed_fields_name_the_file_and_the_field(tmp_path, field, value, words):
    data = _good(tmp_path)
    data[field] = value
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScorerWeightsError, match=words) as info:
        LinearScorer.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kind, words", [("fifo", "FIFO"), ("dev zero", "character device"),
                                         ("deep", "levels deep"), ("huge", "larger than")])
def test_hostile_weights_files_are_refused_unread(tmp_path, kind, words):
    import time

    from hostile_files import hostile

    path = hostile(tmp_path / "w.json", kind)
    start = time.monotonic()
    with pytest.raises(ScorerWeightsError, match=words):
        LinearScorer.load(path)
    assert time.monotonic() - start < 5


def test_a_greedy_bonus_keeps_row_zero_unless_beaten_by_it(tmp_path):
    x, y, groups = _data()
    x[:, FEATURES.index("greedy")] = np.tile([1.0, 0, 0, 0, 0, 0], 40)
    plain, keen = fit(x, y, groups), fit(x, y, groups, greedy_bonus=100.0)
    rows = [np.argmax(keen.predict(x[groups == g])) for g in np.unique(groups)]
    assert rows == [0] * 40
    assert any(np.argmax(plain.predict(x[groups == g])) != 0 for g in np.unique(groups))
    assert LinearScorer.load(keen.save(tmp_path / "w.json")).greedy_bonus == 100.0
