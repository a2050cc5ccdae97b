"""Bootstrap intervals of means and paired differences, against closed forms."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wamdiff2_core.evaluation import intervals
from wamdiff2_core.evaluation.intervals import (bootstrap_mean, needed, needed_for_half_width,
                                                paired_difference, verdict)


def _normal_interval(x: np.ndarray) -> tuple[float, float]:
    """The large-sample interval the percentile bootstrap approaches: the plug-in SD."""
    half = 1.959964 * x.std(ddof=0) / math.sqrt(len(x))
    return x.mean() - half, x.mean() + half


@pytest.mark.parametrize("kind", ["normal", "bernoulli", "skewed"])
def test_bootstrap_interval_matches_the_normal_interval_of_a_large_sample(kind):
    rng = np.random.default_rng(11)
    x = {"normal": lambda: rng.normal(0.6, 0.25, 600),
         "bernoulli": lambda: (rng.random(600) < 0.3).astype(float),
         "skewed": lambda: rng.exponential(0.2, 600)}[kind]()
    ci = bootstrap_mean(x)
    low, high = _normal_interval(x)
    width = high - low
    assert ci.mean == pytest.approx(x.mean(), abs=1e-12)
    assert ci.low == pytest.approx(low, abs=0.04 * width)
    assert ci.high == pytest.approx(high, abs=0.04 * width)
    assert ci.n == 600 and ci.sd == pytest.approx(x.std(ddof=1))


def test_bootstrap_interval_of_a_small_sample_is_within_the_range_and_covers_the_mean():
    x = [0.1, 0.9, 0.4, 0.8, 0.75, 0.2]
    ci = bootstrap_mean(x)
    assert min(x) <= ci.low < ci.mean < ci.high <= max(x)


def test_a_constant_sample_has_the_exact_zero_width_interval():
    ci = bootstrap_mean([0.1] * 7)             # 7 x 0.1 / 7 is not 0.1 in floating point
    assert (ci.mean, ci.low, ci.high, ci.sd) == (0.1, 0.1, 0.1, 0.0)
    assert ci.excludes_zero() and bootstrap_mean([0.0] * 5).excludes_zero() is False


def test_a_planner_against_itself_differs_by_exactly_zero():
    scores = np.random.default_rng(3).random(40)
    diff = paired_difference(scores, scores.copy())
    assert (diff.mean, diff.low, diff.high, diff.half_width) == (0.0, 0.0, 0.0, 0.0)
    assert verdict(diff) == "no difference resolved"
    assert needed(diff.sd, diff.mean) is None


def test_paired_difference_is_b_minus_a_and_tighter_than_either_mean():
    rng = np.random.default_rng(5)
    a = rng.random(200)                        # episodes differ a lot, B adds 0.05 to each
    b = a + 0.05 + rng.normal(0, 0.02, 200)
    diff = paired_difference(a, b)
    assert diff.mean == pytest.approx(np.mean(b - a))
    assert diff.low > 0.04 and diff.high < 0.06
    assert diff.half_width < 0.2 * bootstrap_mean(a).half_width
    assert verdict(diff, ("K=1", "K=8")) == "K=8 better"
    assert verdict(diff, ("K=1", "K=8"), higher_is_better=False) == "K=1 better"
    assert verdict(paired_difference(b, a)) == "A better"


def test_the_interval_is_seeded_and_independent_of_the_chunk_size(monkeypatch):
    x = np.random.default_rng(8).random(50)
    first, again = bootstrap_mean(x), bootstrap_mean(x)
    assert first == again
    assert bootstrap_mean(x, seed=1) != first
    monkeypatch.setattr(intervals, "_CHUNK_VALUES", 50 * 7)   # 7 resamples per chunk
    assert bootstrap_mean(x) == first


def test_empty_single_and_bad_samples():
    assert bootstrap_mean([]).mean is None
    one = bootstrap_mean([0.4])
    assert (one.mean, one.low, one.high, one.text()) == (0.4, None, None, "0.400")
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_mean([0.1, float("nan")])
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1, 2], [1, 2, 3])


def test_episodes_needed_from_the_paired_sd():
    # (1.96 * 0.3 / 0.03)^2 = 384.1 -> 385
    assert needed(0.3, 0.03) == 385
    assert needed(0.3, -0.03) == 385
    assert needed_for_half_width(0.3, 0.03) == 385
    assert needed(None, 0.1) is None and needed(0.2, 0.0) is None
    # at that many items the interval's half-width is about the difference
    rng = np.random.default_rng(2)
    d = rng.normal(0.03, 0.3, needed(0.3, 0.03))
    assert bootstrap_mean(d).half_width == pytest.approx(0.03, rel=0.15)
