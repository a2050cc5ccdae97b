"""L2 per waypoint and at 1/2/3 s on hand-made trajectories with known errors."""
import numpy as np
import pytest

from wamdiff2_core.evaluation.l2 import l2_horizons, l2_per_waypoint, waypoint_index


def test_l2_per_waypoint_is_euclidean_distance():
    gt = np.zeros((8, 2))
    pred = np.zeros((8, 2))
    pred[:, 0] = 3.0
    pred[:, 1] = 4.0                        # a 3-4-5 triangle at every waypoint
    np.testing.assert_allclose(l2_per_waypoint(pred, gt), np.full(8, 5.0))


def test_l2_per_waypoint_batched_and_shape_checked():
    pred = np.zeros((2, 8, 2))
    pred[1, 7] = [0.0, -2.0]
    out = l2_per_waypoint(pred, np.zeros((2, 8, 2)))
    assert out.shape == (2, 8) and out[1, 7] == 2.0 and out.sum() == 2.0
    with pytest.raises(ValueError):
        l2_per_waypoint(np.zeros((8, 2)), np.zeros((7, 2)))


def test_horizon_conventions_on_a_linear_error_curve():
    curve = np.arange(1, 9, dtype=float)    # waypoint i (t = 0.5 * (i + 1)) has error i + 1
    out = l2_horizons(curve)
    # at-time: the waypoint at t = 1 s is the 2nd, at 2 s the 4th, at 3 s the 6th
    assert out["l2_at_1s"] == 2.0 and out["l2_at_2s"] == 4.0 and out["l2_at_3s"] == 6.0
    # averaged up to t: mean of 1..2, 1..4, 1..6
    assert out["l2_avg_1s"] == 1.5 and out["l2_avg_2s"] == 2.5 and out["l2_avg_3s"] == 3.5
    assert set(out) == {f"l2_{kind}_{t}s" for kind in ("at", "avg") for t in (1, 2, 3)}


def test_waypoint_index_rejects_off_grid_horizons():
    assert waypoint_index(0.5) == 0 and waypoint_index(4.0) == 7
    with pytest.raises(ValueError):
        waypoint_index(0.75)
    with pytest.raises(ValueError):
        l2_horizons(np.ones(4), horizons_s=(3.0,))   # only 2 s of waypoints
