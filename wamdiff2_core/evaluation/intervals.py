"""Confidence intervals of means and of paired differences (percentile bootstrap).

Every figure this project reports is a mean over episodes or records, and comparisons are
differences of such means on the same episodes. The interval of a mean resamples its
values with replacement ``resamples`` times (10,000 by default) and takes the 2.5th and
97.5th percentiles of the resampled means; the interval of a paired difference does the
same with the per-item differences ``b - a``, which is what makes a comparison on shared
episodes much tighter than two separate intervals. The generator is seeded, so a report
is the same every time it is built.

A sample whose values are all equal has the exact interval ``[v, v]`` (no rounding from
resampled sums): a planner compared with itself differs by exactly 0 with a zero-width
interval. One value has no interval (``low`` and ``high`` None).

``needed(sd, difference)`` is the number of items a difference of the observed size
would need for its 95% interval to exclude zero, ``(z * sd / difference)^2`` with the
paired SD: what to run next when an interval straddles zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
LEVEL = 0.95
SEED = 0
#: Most resampled values held at once (resamples x items), so memory stays bounded.
_CHUNK_VALUES = 4_000_000


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval: ``n`` items, sample SD ``sd`` (ddof 1)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    sd: float | None
    level: float = LEVEL

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        return self.low is not None and (self.low > 0 or self.high < 0)

    def to_json(self, digits: int = 6) -> dict:
        def r(x):
            return None if x is None else round(float(x), digits)
        return {"mean": r(self.mean), "low": r(self.low), "high": r(self.high),
                "n": self.n, "sd": r(self.sd), "level": self.level}

    def text(self, spec: str = ".3f") -> str:
        """``0.612 [0.551, 0.668]`` (the mean alone where there is no interval)."""
        if self.mean is None:
            return "-"
        if self.low is None:
            return format(self.mean, spec)
        return f"{self.mean:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


def z_value(level: float = LEVEL) -> float:
    """The two-sided normal quantile of ``level`` (1.96 for 0.95)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def bootstrap_mean(values, resamples: int = RESAMPLES, level: float = LEVEL,
                   seed: int = SEED) -> Interval:
    """The mean of ``values`` with its percentile bootstrap interval (see the module
    docstring); NaN values are a ValueError (a metric that is undefined for an item must
    be left out by the caller, who knows why)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if not 0 < level < 1:
        raise ValueError(f"the interval level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if np.isnan(x).any():
        raise ValueError("a bootstrap sample holds NaN: leave undefined values out")
    n = len(x)
    if n == 0:
        return Interval(None, None, None, 0, None, level)
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else None
    if n == 1:
        return Interval(mean, None, None, 1, sd, level)
    if np.all(x == x[0]):                    # exact, not a sum of n copies divided by n
        v = float(x[0])
        return Interval(v, v, v, n, 0.0, level)
    means = _resampled_means(x, resamples, seed)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(mean, float(low), float(high), n, sd, level)


def _resampled_means(x: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """``resamples`` means of ``len(x)`` draws with replacement, in bounded chunks."""
    rng = np.random.default_rng(seed)
    n = len(x)
    chunk = max(1, _CHUNK_VALUES // n)
    out = np.empty(resamples)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        out[start:stop] = x[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return out


def paired_difference(a, b, resamples: int = RESAMPLES, level: float = LEVEL,
                      seed: int = SEED) -> Interval:
    """The mean of ``b - a`` over paired items (``a[i]`` and ``b[i]`` measured on the same
    episode or record) with its bootstrap interval; the lengths must match."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {len(a)} against {len(b)}")
    return bootstrap_mean(b - a, resamples, level, seed)


def needed(sd: float | None, difference: float | None, level: float = LEVEL) -> int | None:
    """Items for the ``level`` interval's half-width to equal ``|difference|`` (so that a
    difference of that size would exclude zero): ``ceil((z sd / difference)^2)``, at least
    2; None where it is undefined (no SD, or no difference to resolve)."""
    if sd is None or difference is None or difference == 0:
        return None
    return max(2, math.ceil((z_value(level) * sd / abs(difference)) ** 2))


def needed_for_half_width(sd: float | None, half_width: float,
                          level: float = LEVEL) -> int | None:
    """Items for an interval of ``+- half_width`` with this SD (normal approximation)."""
    if sd is None or half_width <= 0:
        return None
    return max(2, math.ceil((z_value(level) * sd / half_width) ** 2))


def verdict(diff: Interval, names: tuple[str, str] = ("A", "B"),
            higher_is_better: bool = True) -> str:
    """One of ``"A better"``, ``"B better"`` or ``"no difference resolved"`` for a paired
    difference ``b - a`` (``higher_is_better``: a larger value is better, as a score; False
    for an error such as L2)."""
    if not diff.excludes_zero():
        return "no difference resolved"
    b_larger = diff.low > 0
    return f"{names[1] if b_larger == higher_is_better else names[0]} better"


def interval_pair(values) -> list[float] | None:
    """``[low, high]`` of ``values``' mean, rounded for a report; None without one."""
    ci = bootstrap_mean(values)
    return None if ci.low is None else [round(ci.low, 6), round(ci.high, 6)]
