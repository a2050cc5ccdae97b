"""Coordinate frames of the simulator.

Three frames appear in this package:

- highway-env's world frame ("hw"): x east, y *down* (screen convention), heading measured
  from +x towards +y. Only ``world.py`` and ``expert.py`` touch it.
- the map frame: right-handed, z up, x east, y north: ``X = x_hw``, ``Y = -y_hw``,
  ``yaw = -heading_hw``. Everything outside the highway-env wrapper works in it.
- the ego frame at a given instant: origin at the ego's centre, x forward, y left (metres).
  Waypoints, velocities and accelerations handed to planners and written to data sets are
  in this frame.
"""
from __future__ import annotations

import math

import numpy as np


def hw_to_map(points: np.ndarray) -> np.ndarray:
    """Highway-env positions (..., 2) -> map positions (..., 2): the y axis is flipped."""
    points = np.asarray(points, dtype=np.float64)
    return points * np.array([1.0, -1.0])


def hw_heading_to_yaw(heading: float) -> float:
    """Highway-env heading (towards +y_hw, i.e. clockwise on a map) -> map yaw (CCW)."""
    return wrap_angle(-float(heading))


def map_to_hw(points: np.ndarray) -> np.ndarray:
    """Map positions (..., 2) -> highway-env positions (..., 2)."""
    return hw_to_map(points)


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
