"""Paired comparisons of per-episode reports: blocks, verdicts and the text."""
import numpy as np
import pytest

from wamdiff2_core.evaluation.comparison import (TERMS, compare_episodes, format_closed,
                                                 needed)


def _episode(index: int, score: float, scenario: str, collided: bool = False) -> dict:
    return {"index": index, "seed": 7000 + index, "scenario": scenario, "score": score,
            "terms": {t: score for t in TERMS},
            "collision": {"time_s": 1.0, "at_fault": True} if collided else None,
            "failure": None}


def _pair(n: int, gain: float, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    base = rng.random(n)
    scenarios = ("highway", "intersection", "racetrack")
    a = {i: _episode(i, float(base[i]), scenarios[i % 3]) for i in range(n)}
    b = {i: _episode(i, float(base[i] + gain + rng.normal(0, noise)), scenarios[i % 3],
                     collided=i == 0) for i in range(n)}
    return a, b


def test_a_resolved_gain_is_b_better_with_its_interval():
    a, b = _pair(40, 0.1, 0.02)
    report = compare_episodes(a, b, ("K=1", "K=8"))
    block = report["score"]
    assert block["verdict"] == "B better"
    diff = block["difference"]
    mean = np.mean([b[i]["score"] - a[i]["score"] for i in range(40)])
    assert diff["mean"] == pytest.approx(mean, abs=1e-6)
    assert diff["low"] < mean < diff["high"] and diff["high"] - diff["low"] < 0.02
    assert block["difference"]["n"] == 40 and report["episodes"] == 40
    assert set(report["terms"]) == set(TERMS)
    assert set(report["by_scenario"]) == {"highway", "intersection", "racetrack"}
    assert report["by_scenario"]["highway"]["difference"]["n"] == 14
    assert report["collisions"] == [0, 1]
    first = report["per_episode"][0]
    assert first["difference"] == pytest.approx(b[0]["score"] - a[0]["score"], abs=1e-6)
    assert first["collision"] == [False, True]
    text = format_closed(report)
    assert "verdict (score): B better, K=8 (B - A = +0.1" in text
    assert "fewer than" not in text


def test_noise_is_no_difference_resolved_with_the_episodes_it_would_need():
    a, b = _pair(30, 0.01, 0.2, seed=4)
    block = compare_episodes(a, b, ("A", "B"))["score"]
    diff = block["difference"]
    assert block["verdict"] == "no difference resolved"
    assert diff["low"] < 0 < diff["high"]
    assert block["needed_to_resolve"] == needed(diff["sd"], diff["mean"]) > 30
    assert block["needed_for_half_width_0.03"] == needed(diff["sd"], 0.03)


def test_only_episodes_both_drove_are_paired_and_candidates_are_reported():
    a, b = _pair(12, 0.0, 0.1)
    del b[11]
    report = compare_episodes(a, b, ("A", "B"))
    assert report["episodes"] == 11
    report["info"] = {"b": {"candidates": {"frames": 200, "not_greedy": 9, "fallbacks": 0}}}
    assert "candidates B: 9 of 200 frames not the greedy plan" in format_closed(report)
    with pytest.raises(ValueError, match="no episode"):
        compare_episodes(a, {}, ("A", "B"))
