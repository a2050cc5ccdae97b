"""Plausible ego motion: the one definition of the bounds the planning node applies to
odometry and the command line applies to ``--velocity`` / ``--acceleration``.

A speed above :data:`MAX_SPEED_MPS` or an acceleration above :data:`MAX_ACCEL_MPS2` is a
sensor fault or a typo, not driving: the prompt would be far outside anything the model saw,
and the plan would be silently meaningless. The node's ``max_speed_mps`` / ``max_accel_mps2``
parameters default to these values (and may change them); the checks word their refusal the
same way everywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

#: 252 km/h: faster than any road vehicle the planner is meant for.
MAX_SPEED_MPS = 70.0
#: About 2 g: more than a car brakes or accelerates.
MAX_ACCEL_MPS2 = 20.0


class ImplausibleMotion(ValueError):
    """Ego motion outside the plausible bounds; the message is one sentence."""


def check_speed(velocity: Sequence[float], max_speed_mps: float = MAX_SPEED_MPS,
                what: str = "speed", limit: str = "max_speed_mps") -> float:
    """The speed (m/s) of ``velocity`` (vx, vy); ImplausibleMotion when it exceeds
    ``max_speed_mps`` or is not finite. ``what`` / ``limit`` name the value and the bound in
    the message (e.g. "odometry speed", "max_speed_mps")."""
    speed = math.hypot(float(velocity[0]), float(velocity[1]))
    if not speed <= max_speed_mps:
        raise ImplausibleMotion(f"{what} {speed:.3g} m/s exceeds {limit} {max_speed_mps:g} "
                                f"m/s")
    return speed


def check_accel(acceleration: Sequence[float], max_accel_mps2: float = MAX_ACCEL_MPS2,
                what: str = "acceleration", limit: str = "max_accel_mps2") -> float:
    """The magnitude (m/s^2) of ``acceleration`` (ax, ay); ImplausibleMotion when it exceeds
    ``max_accel_mps2`` or is not finite."""
    accel = math.hypot(float(acceleration[0]), float(acceleration[1]))
    if not accel <= max_accel_mps2:
        raise ImplausibleMotion(f"{what} {accel:.3g} m/s^2 exceeds {limit} {max_accel_mps2:g} "
                                f"m/s^2")
    return accel


@dataclass(frozen=True)
class ComfortBounds:
    """NAVSIM's (nuPlan's) comfort limits: the one definition, read by the closed-loop score
    (``evaluation.pdms``, which owns their use) and by the candidate features
    (``candidates.features``, which sit below evaluation and so cannot import it)."""

    min_lon_accel: float = -4.05       # m/s^2
    max_lon_accel: float = 2.40        # m/s^2
    max_abs_lat_accel: float = 4.89    # m/s^2
    max_abs_yaw_rate: float = 0.95     # rad/s
    max_abs_yaw_accel: float = 1.93    # rad/s^2
    max_abs_lon_jerk: float = 4.13     # m/s^3
    max_abs_jerk: float = 8.37         # m/s^3
