"""Oriented-box collisions on hand-made geometry."""
import math

import numpy as np

from wamdiff2_core.evaluation.collision import (
    box_corners, boxes_overlap, headings_from_waypoints, plan_collisions)

EGO = (4.0, 2.0)                               # length, width


def _overlap(a, b):
    """a, b: (x, y, heading, length, width)."""
    ca = box_corners(np.array(a[:2]), np.array(a[2]), a[3], a[4])
    cb = box_corners(np.array(b[:2]), np.array(b[2]), b[3], b[4])
    return bool(boxes_overlap(ca, a[2], cb, b[2]))


def test_box_corners_axis_aligned_and_rotated():
    c = box_corners(np.zeros(2), np.array(0.0), 4.0, 2.0)
    np.testing.assert_allclose(c, [[2, 1], [-2, 1], [-2, -1], [2, -1]])
    c = box_corners(np.array([1.0, 1.0]), np.array(math.pi / 2), 4.0, 2.0)
    np.testing.assert_allclose(c, [[0, 3], [0, -1], [2, -1], [2, 3]], atol=1e-12)


def test_axis_aligned_overlap_separation_and_touching():
    assert _overlap((0, 0, 0, 4, 2), (3.9, 0, 0, 4, 2))          # 0.1 m overlap
    assert not _overlap((0, 0, 0, 4, 2), (4.1, 0, 0, 4, 2))      # 0.1 m gap
    assert not _overlap((0, 0, 0, 4, 2), (4.0, 0, 0, 4, 2))      # touching only
    assert not _overlap((0, 0, 0, 4, 2), (0, 2.05, 0, 4, 2))     # side by side, lanes apart


def test_rotation_matters_where_axis_aligned_boxes_would_disagree():
    # A 4x2 box at the origin and a 4x0.2 bar whose centre is 2.6 m ahead. Axis-aligned the
    # bar (reaching back to x = 0.6) would overlap; rotated 90 deg it spans x in [2.5, 2.7]
    # and clears the front face (x = 2).
    assert _overlap((0, 0, 0, 4, 2), (2.6, 0, 0, 4, 0.2))
    assert not _overlap((0, 0, 0, 4, 2), (2.6, 0, math.pi / 2, 4, 0.2))
    # A diamond (45 deg square) whose bounding boxes overlap but whose shapes do not:
    # square of side 2 centred at (3.2, 1.0+1.2) rotated 45 deg reaches down-left to a
    # vertex at distance sqrt(2) from its centre along the (-1, -1) direction.
    centre = (2.0 + 1.2, 1.0 + 1.2)
    assert not _overlap((0, 0, 0, 4, 2), (*centre, math.pi / 4, 2, 2))
    assert _overlap((0, 0, 0, 4, 2), (2.0 + 0.6, 1.0 + 0.6, math.pi / 4, 2, 2))


def test_headings_follow_the_direction_of_travel():
    wp = np.array([[1, 0], [2, 0], [2, 1], [2, 1.01]] + [[1, 1.01]] * 4, float)
    h = headings_from_waypoints(wp)
    np.testing.assert_allclose(h[:3], [0.0, 0.0, math.pi / 2])
    assert h[3] == h[2]                         # 1 cm step: heading kept
    np.testing.assert_allclose(h[4:], math.pi)  # then turned back, and stopped


def _straight_plan(speed_mps=10.0):
    t = np.arange(1, 9) * 0.5
    return np.stack([speed_mps * t, np.zeros(8)], axis=1)    # (8, 2)


def test_plan_hits_a_stopped_car_ahead_from_the_right_waypoint_on():
    plan = _straight_plan()                                  # x = 5, 10, ..., 40
    stopped = {"id": 7, "size": [4.0, 2.0], "poses": [[20.0, 0.0, 0.0]] * 8}
    hits = plan_collisions(plan, EGO, [stopped])
    # ego reaches x = 20 at waypoint 4 (t = 2 s); at x = 15 and 25 the boxes are 1 m apart
    assert hits.tolist() == [False, False, False, True, False, False, False, False]


def test_plan_clears_a_car_in_the_next_lane_and_a_departed_car():
    plan = _straight_plan()
    next_lane = {"id": 1, "size": [4.5, 2.0], "poses": [[10.0 * t, 3.5, 0.0]
                                                         for t in np.arange(1, 9) * 0.5]}
    gone = {"id": 2, "size": [4.0, 2.0], "poses": [[5.0, 0.0, 0.0]] + [[np.nan] * 3] * 7}
    hits = plan_collisions(plan, EGO, [next_lane, gone])
    assert hits.tolist() == [True] + [False] * 7              # only while `gone` is there
    gone_as_json_null = dict(gone, poses=[[5.0, 0.0, 0.0]] + [[None] * 3] * 7)
    assert plan_collisions(plan, EGO, [gone_as_json_null]).tolist() == [True] + [False] * 7


def test_heading_from_travel_decides_a_diagonal_near_miss():
    # The plan moves diagonally at 45 deg; a car parked just off the diagonal is cleared by
    # the rotated ego box but would be hit by an axis-aligned one.
    plan = np.stack([np.arange(1, 9) * 3.0, np.arange(1, 9) * 3.0], axis=1)
    parked = {"id": 3, "size": [4.0, 2.0],
              "poses": [[12.0 + 1.6, 12.0 - 1.6, math.pi / 4]] * 8}
    assert not plan_collisions(plan, EGO, [parked]).any()
    axis_aligned = box_corners(plan[3], np.array(0.0), *EGO)
    other = box_corners(np.array([13.6, 10.4]), np.array(math.pi / 4), 4.0, 2.0)
    assert boxes_overlap(axis_aligned, 0.0, other, math.pi / 4)
