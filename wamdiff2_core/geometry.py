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
