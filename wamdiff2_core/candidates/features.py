"""What a run-time scorer may know about each candidate: numbers from the plan itself, the
model's confidences, the frame's ego motion and command, and the other candidates.

Nothing here reads the world: the inputs are a :class:`~.sets.CandidateSet` and a
:class:`ScoringContext` (what the planner was given). ``FEATURES`` names the columns of
``feature_matrix`` in order; the learned scorer's weights are stored against these names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wamdiff2_core.candidates.sets import CandidateSet
from wamdiff2_core.tasks import WAYPOINT_DT_S
from wamdiff2_core.tasks.motion import ComfortBounds

#: NAVSIM's comfort limits (the closed-loop score's, ``evaluation.pdms``), applied to the plan.
COMFORT = ComfortBounds()
#: Side of a command (+1 left, -1 right); the plan's lateral end offset is read against it.
COMMAND_SIDE = {"left": 1.0, "right": -1.0, "straight": 0.0}
#: Log confidences below this count as this (a probability-0 token would be -inf).
MIN_LOG_CONF = -10.0

FEATURES = (
    "log_conf",          # mean log probability of the answer's tokens
    "min_conf",          # least token probability
    "log_conf_rank",     # 1 for the most confident candidate of the set .. 0 for the least
    "greedy",            # row 0: the greedy plan for the frame's own command
    "own_command",       # the row's prompt states the frame's command
    "speed0",            # the ego's speed now [m/s]
    "speed_ratio",       # mean planned speed / max(speed now, 1 m/s)
    "progress",          # distance to the last waypoint / max over the set
    "max_accel",         # largest longitudinal acceleration of the plan [m/s^2]
    "max_decel",         # largest braking of the plan [m/s^2, positive]
    "max_jerk",          # largest |longitudinal jerk| [m/s^3]
    "max_yaw_rate",      # largest |yaw rate| [rad/s]
    "max_lat_accel",     # largest |lateral acceleration| [m/s^2]
    "comfort_ok",        # 1 when every bound above holds
    "lateral_end",       # |y| of the last waypoint [m]
    "command_side",      # y of the last waypoint towards the command's side [m]
    "consensus",         # mean distance to the other candidates / max(speed now, 1)
    "to_greedy",         # mean distance to row 0 / max(speed now, 1)
)


@dataclass(frozen=True)
class ScoringContext:
    """What the planner had for the frame: the command and ego motion it was given
    (ego frame, m/s and m/s^2)."""

    command: str
    velocity: tuple[float, float] = (0.0, 0.0)
    acceleration: tuple[float, float] = (0.0, 0.0)

    @property
    def speed(self) -> float:
        return math.hypot(*self.velocity)


@dataclass(frozen=True)
class Kinematics:
    """A plan's motion read off its waypoints (0.5 s apart, from the ego at t = 0)."""

    speeds: np.ndarray        # (8,) mean speed of each interval [m/s]
    accels: np.ndarray        # (8,) longitudinal acceleration between intervals [m/s^2]
    jerks: np.ndarray         # (7,)
    yaw_rates: np.ndarray     # (8,) [rad/s]
    lat_accels: np.ndarray    # (8,) [m/s^2]

    def comfort_ok(self) -> bool:
        bounds = COMFORT
        return bool(self.accels.min() >= bounds.min_lon_accel
                    and self.accels.max() <= bounds.max_lon_accel
                    and np.abs(self.yaw_rates).max() <= bounds.max_abs_yaw_rate
                    and np.abs(self.lat_accels).max() <= bounds.max_abs_lat_accel
                    and np.abs(self.jerks).max(initial=0.0) <= bounds.max_abs_lon_jerk)


def kinematics(waypoints: np.ndarray, velocity: tuple[float, float]) -> Kinematics:
    """The motion of ``waypoints`` (8, 2) for an ego moving at ``velocity`` now; the first
    interval's acceleration is taken from the speed now (half an interval before its
    middle)."""
    points = np.vstack([np.zeros((1, 2)), np.asarray(waypoints, np.float64)])     # (9, 2)
    steps = np.diff(points, axis=0) / WAYPOINT_DT_S                                # (8, 2)
    speeds = np.linalg.norm(steps, axis=1)
    speed0 = math.hypot(*velocity)
    accels = np.diff(np.concatenate([[speed0], speeds])) / np.concatenate(
        [[WAYPOINT_DT_S / 2], np.full(7, WAYPOINT_DT_S)])
    jerks = np.diff(accels[1:]) / WAYPOINT_DT_S
    heading0 = math.atan2(velocity[1], velocity[0]) if speed0 > 0.5 else 0.0
    headings, last = [], heading0
    for (dx, dy), v in zip(steps, speeds):
        last = math.atan2(dy, dx) if v > 0.5 else last       # a standstill keeps its heading
        headings.append(last)
    turns = np.diff(np.concatenate([[heading0], headings]))
    yaw_rates = (turns + np.pi) % (2 * np.pi) - np.pi
    yaw_rates = yaw_rates / WAYPOINT_DT_S
    return Kinematics(speeds, accels, jerks, yaw_rates, speeds * yaw_rates)


def _mean_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b, axis=-1).mean())


def feature_matrix(cset: CandidateSet, context: ScoringContext) -> np.ndarray:
    """(K, len(FEATURES)) features of every candidate; NaN rows for candidates that did not
    parse."""
    k = len(cset)
    out = np.full((k, len(FEATURES)), np.nan)
    valid = cset.valid_indices()
    if not valid:
        return out
    scale = max(context.speed, 1.0)
    wps = cset.waypoints()
    distances = np.linalg.norm(wps[:, -1], axis=-1)
    best = max(float(np.nanmax(distances[valid])), 1e-3)
    confs = np.array([max(cset.candidates[i].log_confidence, MIN_LOG_CONF) for i in valid])
    order = np.argsort(np.argsort(confs, kind="stable"), kind="stable")
    ranks = order / max(len(valid) - 1, 1)
    side = COMMAND_SIDE[context.command]
    for j, i in enumerate(valid):
        cand = cset.candidates[i]
        kin = kinematics(cand.waypoints, context.velocity)
        others = [o for o in valid if o != i]
        consensus = (np.mean([_mean_distance(wps[i], wps[o]) for o in others]) / scale
                     if others else 0.0)
        row = {
            "log_conf": confs[j], "min_conf": cand.min_confidence,
            "log_conf_rank": ranks[j],
            "greedy": float(i == 0), "own_command": float(cand.command == context.command),
            "speed0": context.speed, "speed_ratio": float(kin.speeds.mean()) / scale,
            "progress": distances[i] / best,
            "max_accel": max(float(kin.accels.max()), 0.0),
            "max_decel": max(float(-kin.accels.min()), 0.0),
            "max_jerk": float(np.abs(kin.jerks).max(initial=0.0)),
            "max_yaw_rate": float(np.abs(kin.yaw_rates).max()),
            "max_lat_accel": float(np.abs(kin.lat_accels).max()),
            "comfort_ok": float(kin.comfort_ok()),
            "lateral_end": abs(float(wps[i, -1, 1])),
            "command_side": side * float(wps[i, -1, 1]),
            "consensus": consensus,
            "to_greedy": (_mean_distance(wps[i], wps[0]) / scale if cset.candidates[0].valid
                          else 0.0),
        }
        out[i] = [row[name] for name in FEATURES]
    return out
