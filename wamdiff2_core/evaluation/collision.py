"""Collisions of a planned trajectory with other vehicles' future boxes.

The ego is a rectangle of ``ego_size = (length, width)`` centred on each planned waypoint,
its heading the direction of travel from the previous waypoint (the first one from the
ego's position at t = 0, the origin of the ego frame). Every other vehicle is a rectangle at
its recorded pose at the same time. Two rectangles collide when their interiors overlap,
decided by the separating axis theorem on the four edge normals; boxes that only touch do
not collide.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

MIN_STEP_M = 0.1     # a shorter step leaves the heading unchanged (a stopped ego has none)
_TOUCH_EPS = 1e-9    # projections overlapping by less than this count as separated


def headings_from_waypoints(waypoints: np.ndarray, initial_heading: float = 0.0,
                            min_step_m: float = MIN_STEP_M) -> np.ndarray:
    """Heading (radians, ego frame) at each waypoint from the direction of travel.

    ``waypoints`` is (N, 2); the path starts at the origin with ``initial_heading``. A
    step shorter than ``min_step_m`` keeps the previous heading. Returns (N,).
    """
    wp = np.asarray(waypoints, dtype=np.float64)
    path = np.concatenate([np.zeros((1, 2)), wp], axis=0)           # (N + 1, 2)
    steps = np.diff(path, axis=0)                                   # (N, 2)
    headings = np.empty(wp.shape[0])
    previous = float(initial_heading)
    for i, (dx, dy) in enumerate(steps):
        if np.hypot(dx, dy) >= min_step_m:
            previous = float(np.arctan2(dy, dx))
        headings[i] = previous
    return headings


def box_corners(centres: np.ndarray, headings: np.ndarray, length: float,
                width: float) -> np.ndarray:
    """Corners of oriented rectangles, counter-clockwise from front-left: (..., 4, 2).

    ``centres`` is (..., 2), ``headings`` (...); ``length`` runs along the heading.
    """
    centres = np.asarray(centres, dtype=np.float64)
    headings = np.asarray(headings, dtype=np.float64)
    cos, sin = np.cos(headings), np.sin(headings)
    forward = np.stack([cos, sin], axis=-1) * (length / 2.0)       # (..., 2)
    left = np.stack([-sin, cos], axis=-1) * (width / 2.0)          # (..., 2)
    signs = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.float64)  # (4, 2)
    offsets = (signs[:, 0, None] * forward[..., None, :]
               + signs[:, 1, None] * left[..., None, :])           # (..., 4, 2)
    return centres[..., None, :] + offsets


def _axes(headings: np.ndarray) -> np.ndarray:
    """The two edge normals of each rectangle: (..., 2, 2)."""
    cos, sin = np.cos(headings), np.sin(headings)
    return np.stack([np.stack([cos, sin], -1), np.stack([-sin, cos], -1)], axis=-2)


def boxes_overlap(corners_a: np.ndarray, headings_a: np.ndarray, corners_b: np.ndarray,
                  headings_b: np.ndarray) -> np.ndarray:
    """Whether rectangle pairs overlap (separating axis theorem), broadcasting over (...).

    ``corners_*`` are (..., 4, 2) from :func:`box_corners`, ``headings_*`` (...). Returns a
    boolean array of the broadcast shape (...).
    """
    corners_a, corners_b = np.broadcast_arrays(np.asarray(corners_a), np.asarray(corners_b))
    axes = np.concatenate([_axes(np.asarray(headings_a, dtype=np.float64)),
                           _axes(np.asarray(headings_b, dtype=np.float64))], axis=-2)
    axes = np.broadcast_to(axes, corners_a.shape[:-2] + (4, 2))      # (..., 4 axes, 2)
    proj_a = np.einsum("...cd,...ad->...ac", corners_a, axes)       # (..., 4 axes, 4)
    proj_b = np.einsum("...cd,...ad->...ac", corners_b, axes)       # (..., 4 axes, 4)
    overlap = (np.minimum(proj_a.max(-1), proj_b.max(-1))
               - np.maximum(proj_a.min(-1), proj_b.min(-1)))        # (..., 4 axes)
    return np.all(overlap > _TOUCH_EPS, axis=-1)


def plan_collisions(waypoints: np.ndarray, ego_size: Sequence[float],
                    others_future: Iterable[Mapping]) -> np.ndarray:
    """Which planned waypoints put the ego box inside another vehicle's box.

    ``waypoints`` is (N, 2) in the ego frame; ``ego_size`` is ``[length, width]``;
    ``others_future`` holds ``{"size": [l, w], "poses": [[x, y, heading] * N]}`` as in the
    data set's ``meta.others_future``. A pose with a non-finite value (a vehicle that is
    gone) never collides. Returns a boolean (N,) array.
    """
    wp = np.asarray(waypoints, dtype=np.float64)
    ego_heading = headings_from_waypoints(wp)                       # (N,)
    ego_corners = box_corners(wp, ego_heading, *map(float, ego_size))   # (N, 4, 2)
    hits = np.zeros(wp.shape[0], dtype=bool)
    for other in others_future:
        poses = np.array(other["poses"], dtype=np.float64).reshape(-1, 3)   # (N, 3)
        if poses.shape[0] != wp.shape[0]:
            raise ValueError(f"other vehicle {other.get('id')} has {poses.shape[0]} poses "
                             f"for {wp.shape[0]} waypoints")
        valid = np.all(np.isfinite(poses), axis=-1)                 # (N,)
        safe = np.where(valid[:, None], poses, 1e6)                 # far away when gone
        length, width = map(float, other["size"])
        corners = box_corners(safe[:, :2], safe[:, 2], length, width)   # (N, 4, 2)
        hits |= valid & boxes_overlap(ego_corners, ego_heading, corners, safe[:, 2])
    return hits
