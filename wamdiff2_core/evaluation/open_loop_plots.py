"""PNG plots of open-loop results (matplotlib, Agg canvas; pyplot's global state untouched)."""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np


def _figure(width: float = 6.4, height: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_l2_per_waypoint(l2_per_waypoint: Sequence[float], path: str | os.PathLike,
                         dt_s: float = 0.5, title: str = "Open-loop L2 per waypoint",
                         intervals: Sequence | None = None) -> None:
    """Bars: the L2 error of each waypoint (at-time), with its 95% interval as an error bar
    where ``intervals`` gives one ([low, high] per waypoint); line: the average up to that
    time."""
    curve = np.asarray(l2_per_waypoint, dtype=np.float64)             # (N,)
    times = dt_s * np.arange(1, curve.shape[0] + 1)
    running = np.cumsum(curve) / np.arange(1, curve.shape[0] + 1)     # (N,)
    figure = _figure()
    ax = figure.add_subplot()
    yerr = None
    if intervals is not None and all(pair is not None for pair in intervals):
        pairs = np.asarray(intervals, dtype=np.float64)                # (N, 2)
        yerr = np.clip(np.stack([curve - pairs[:, 0], pairs[:, 1] - curve]), 0.0, None)
    ax.bar(times, curve, width=0.8 * dt_s, color="tab:blue", yerr=yerr, capsize=3,
           label="L2 at t" + (" (95% interval)" if yerr is not None else ""))
    ax.plot(times, running, "o-", color="tab:orange", label="L2 averaged over waypoints <= t")
    for t, v in zip(times, curve):
        ax.annotate(f"{v:.2f}", (t, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(times)
    ax.set_xlabel("time ahead (s)")
    ax.set_ylabel("L2 error (m)")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    figure.savefig(os.fspath(path))


def plot_collision_per_waypoint(rates: Sequence[float], path: str | os.PathLike,
                                expert_rates: Sequence[float] | None = None,
                                dt_s: float = 0.5) -> None:
    """Share of plans whose ego box overlaps another vehicle at each waypoint (percent)."""
    rates = 100.0 * np.asarray(rates, dtype=np.float64)                # (N,)
    times = dt_s * np.arange(1, rates.shape[0] + 1)
    figure = _figure()
    ax = figure.add_subplot()
    ax.plot(times, rates, "o-", color="tab:red", label="model")
    if expert_rates is not None:
        ax.plot(times, 100.0 * np.asarray(expert_rates, dtype=np.float64), "s--",
                color="tab:gray", label="expert (recorded)")
    ax.set_xticks(times)
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("time ahead (s)")
    ax.set_ylabel("plans in collision (%)")
    ax.set_title("Open-loop collisions per waypoint")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    figure.savefig(os.fspath(path))
