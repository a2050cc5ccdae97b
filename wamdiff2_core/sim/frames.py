"""Coordinate frames of the simulator.

Three frames appear in this package:

- highway-env's world frame ("hw"): x east, y *down* (screen convention), heading measured
  from +x towards +y. Only ``world.py`` and ``expert.py`` touch it.
- the map frame: right-handed, z up, x east, y north: ``X = x_hw``, ``Y = -y_hw``,
  ``yaw = -heading_hw``. Everything outside the highway-env wrapper works in it.
- the ego frame at a given instant: origin at the ego's centre, x forward, y left (metres).
  Waypoints, velocities and accelerations handed to planners and written to data sets are
  in this frame.

Conversions between the map and ego frames, and footprint boxes: ``wamdiff2_core.geometry``.
"""
from __future__ import annotations

import numpy as np

from wamdiff2_core.geometry import wrap_angle


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
