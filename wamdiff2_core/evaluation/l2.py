"""L2 displacement error of planned waypoints, per waypoint and at 1 / 2 / 3 s.

Two conventions exist in the literature and both are reported, each under its own key:

- ``l2_at_{T}s``: the error of the single waypoint at time T (e.g. the 2nd waypoint for
  1 s when waypoints are 0.5 s apart);
- ``l2_avg_{T}s``: the mean error over every waypoint up to and including time T (the
  ST-P3 / UniAD-style average).

Waypoints are metres in the ego frame, ``WAYPOINT_DT_S`` apart, starting one step after the
current time (t = 0.5, 1.0, ..., 4.0 s for 8 waypoints).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WAYPOINT_DT_S = 0.5          # the data format's spacing (wamdiff2_core.tasks.WAYPOINT_DT_S)
HORIZONS_S = (1.0, 2.0, 3.0)


def l2_per_waypoint(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Euclidean distance between matching waypoints.

    ``pred`` and ``gt`` are (..., N, 2) arrays of the same shape; returns (..., N).
    """
    pred = np.asarray(pred, dtype=np.float64)
    gt = np.asarray(gt, dtype=np.float64)
    if pred.shape != gt.shape or pred.shape[-1] != 2:
        raise ValueError(f"waypoint shapes differ or are not (..., N, 2): "
                         f"{pred.shape} vs {gt.shape}")
    return np.linalg.norm(pred - gt, axis=-1)


def waypoint_index(horizon_s: float, dt_s: float = WAYPOINT_DT_S) -> int:
    """The 0-based index of the waypoint at ``horizon_s`` (which must be a multiple of dt)."""
    steps = horizon_s / dt_s
    if steps < 1 or abs(steps - round(steps)) > 1e-9:
        raise ValueError(f"horizon {horizon_s} s is not a positive multiple of {dt_s} s")
    return int(round(steps)) - 1


def l2_horizons(per_waypoint: Sequence[float], horizons_s: Sequence[float] = HORIZONS_S,
                dt_s: float = WAYPOINT_DT_S) -> dict[str, float]:
    """Both L2 conventions at each horizon from a per-waypoint error curve.

    ``per_waypoint`` is the (N,) mean error of each waypoint over the data set. Returns
    ``{"l2_at_1s": ..., "l2_avg_1s": ..., ...}``; a horizon beyond the last waypoint is an
    error. Averaging over samples then over waypoints equals the reverse order, so the
    result is the same as averaging per-sample horizon errors.
    """
    curve = np.asarray(per_waypoint, dtype=np.float64)
    out: dict[str, float] = {}
    for horizon in horizons_s:
        index = waypoint_index(horizon, dt_s)
        if index >= curve.shape[0]:
            raise ValueError(f"horizon {horizon} s is past the last waypoint "
                             f"({curve.shape[0]} x {dt_s} s)")
        tag = f"{horizon:g}s"
        out[f"l2_at_{tag}"] = float(curve[index])
        out[f"l2_avg_{tag}"] = float(curve[: index + 1].mean())
    return out
