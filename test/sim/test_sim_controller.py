"""The tracking controller's look-ahead point stays finite on degenerate plans."""
import numpy as np

from wamdiff2_core.sim.controller import EXTEND_CHORD_M, _lookahead_point


def test_lookahead_past_the_end_of_a_plan_that_comes_back_is_finite():
    """A plan that goes out 1.5 m and comes back to its start: the chord over the last
    EXTEND_CHORD_M metres has zero length (it once divided by zero, the NaN crashed the
    simulator). The point then continues along the last segment."""
    points = np.array([[0.0, 0.0], [1.5, 0.0], [0.0, 0.0]])
    assert 2 * 1.5 == EXTEND_CHORD_M
    got = _lookahead_point(points, np.array([0.0, 0.0]), 10.0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, [-10.0 + 3.0 - 0.0, 0.0], atol=1e-9)


def test_lookahead_extends_a_straight_plan_along_it():
    points = np.array([[0.0, 0.0], [5.0, 0.0], [10.0, 0.0]])
    np.testing.assert_allclose(_lookahead_point(points, np.array([9.0, 0.0]), 4.0), [13.0, 0.0])
