"""Plane geometry in the map and ego frames (numpy only), shared by the simulator, the
closed-loop score and the ROS tools.

- the map frame: right-handed, z up, x east, y north.
- the ego frame at a given instant: origin at the ego's centre, x forward, y left (metres).
  Waypoints, velocities and accelerations handed to planners and written to data sets are in
  this frame.
"""
from __future__ import annotations

import math

import numpy as np


def wrap_angle(angle: float | np.ndarray) -> float | np.ndarray:
    """Wrap angles to [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


def rotation(yaw: float) -> np.ndarray:
    """2-D rotation matrix (2, 2) taking ego-frame vectors to map-frame vectors."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s], [s, c]])


def map_to_ego(points: np.ndarray, ego_xy: np.ndarray, ego_yaw: float) -> np.ndarray:
    """Map positions (..., 2) -> ego frame (..., 2) of an ego at ``ego_xy`` with ``ego_yaw``."""
    delta = np.asarray(points, dtype=np.float64) - np.asarray(ego_xy, dtype=np.float64)
    return delta @ rotation(ego_yaw)  # R^T applied to row vectors


def ego_to_map(points: np.ndarray, ego_xy: np.ndarray, ego_yaw: float) -> np.ndarray:
    """Ego-frame positions (..., 2) -> map positions (..., 2); inverse of :func:`map_to_ego`."""
    return np.asarray(points, dtype=np.float64) @ rotation(ego_yaw).T + np.asarray(
        ego_xy, dtype=np.float64)


def vector_map_to_ego(vectors: np.ndarray, ego_yaw: float) -> np.ndarray:
    """Rotate map-frame vectors (..., 2) (velocities, accelerations) into the ego frame."""
    return np.asarray(vectors, dtype=np.float64) @ rotation(ego_yaw)


def box_corners(center: np.ndarray, yaw: float, length: float, width: float) -> np.ndarray:
    """The four footprint corners (4, 2) of an oriented box, counter-clockwise from front-left."""
    half = np.array([[length / 2, width / 2], [-length / 2, width / 2],
                     [-length / 2, -width / 2], [length / 2, -width / 2]])
    return half @ rotation(yaw).T + np.asarray(center, dtype=np.float64)


def boxes_overlap(corners_a: np.ndarray, corners_b: np.ndarray) -> bool:
    """Whether two convex quadrilaterals (4, 2) intersect (separating-axis test)."""
    for corners in (corners_a, corners_b):
        edges = np.roll(corners, -1, axis=0) - corners  # (4, 2)
        normals = np.stack([-edges[:, 1], edges[:, 0]], axis=1)
        for normal in normals:
            pa = corners_a @ normal
            pb = corners_b @ normal
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


def _heading_at(points: np.ndarray, index: int, previous: float) -> float:
    """Direction of travel from points[index] to the next point at least 1 cm away; `previous`
    when none is (standing still)."""
    for nxt in points[index + 1:]:
        delta = nxt - points[index]
        if math.hypot(delta[0], delta[1]) >= 0.01:
            return math.atan2(delta[1], delta[0])
    return previous


def retime_waypoints(waypoints: np.ndarray, shift_s: float, step_s: float = 0.5) -> np.ndarray:
    """A plan made ``shift_s`` seconds ago, as seen now, assuming the ego followed it.

    ``waypoints`` (N, 2) are ego-frame positions at t = step, 2 step, ... N step after the
    plan's instant (the ego at the origin, facing +x, at t = 0). Returns (N, 2) positions at
    t = shift + step, ..., shift + N step, in the ego frame at t = shift (placed and turned
    by the plan itself, linearly interpolated); times past the plan's end hold its last
    point (the re-timed plan stops where the plan ends, it never extrapolates).
    """
    wp = np.asarray(waypoints, dtype=np.float64).reshape(-1, 2)
    n = len(wp)
    track = np.vstack([np.zeros((1, 2)), wp])                     # (N + 1, 2) at 0..N step
    times = np.arange(n + 1) * step_s                             # (N + 1,)
    shift = float(np.clip(shift_s, 0.0, times[-1]))

    def at(t: np.ndarray) -> np.ndarray:                          # (K,) -> (K, 2)
        t = np.clip(t, 0.0, times[-1])
        return np.stack([np.interp(t, times, track[:, 0]), np.interp(t, times, track[:, 1])],
                        axis=1)

    origin = at(np.array([shift]))[0]                              # (2,)
    segment = min(int(shift // step_s), n - 1)
    heading = _heading_at(track, segment, 0.0)
    future = at(shift + step_s * np.arange(1, n + 1))              # (N, 2)
    return map_to_ego(future, origin, heading)


def stop_waypoints(speed_mps: float, decel_mps2: float, n: int = 8,
                   step_s: float = 0.5) -> np.ndarray:
    """A straight stop: (n, 2) ego-frame positions at t = step .. n step of an ego braking
    from ``speed_mps`` (forward; negative counts as 0) at ``decel_mps2`` and then standing."""
    v = max(0.0, float(speed_mps))
    t = step_s * np.arange(1, n + 1)                               # (n,)
    t_stop = v / decel_mps2
    x = np.where(t < t_stop, v * t - 0.5 * decel_mps2 * t * t, 0.5 * v * t_stop)
    return np.stack([x, np.zeros(n)], axis=1)
