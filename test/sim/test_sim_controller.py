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



def _follow_arc(radius: float, speed: float, steps: int = 35):
    """highway-env's own kinematic vehicle (its ``step``) steered by the controller along a
    4 s circular plan to the left; returns the steering commands and the distances from the
    arc."""
    from highway_env.road.road import Road, RoadNetwork
    from highway_env.vehicle.kinematics import Vehicle

    from wamdiff2_core.sim.controller import Plan, TrackingController
    from wamdiff2_core.sim.frames import hw_heading_to_yaw, hw_to_map

    angles = speed * np.arange(1, 9) * 0.5 / radius
    waypoints = np.stack([radius * np.sin(angles), radius * (1 - np.cos(angles))], axis=1)
    controller = TrackingController()
    controller.set_plan(Plan.from_waypoints(waypoints, np.zeros(2), 0.0, 0.0))
    road = Road(RoadNetwork.straight_road_network(lanes=1, length=1000.0))
    vehicle = Vehicle(road, [0.0, 0.0], 0.0, speed)
    steering, errors = [], []
    for step in range(steps):
        accel, steer = controller.control(hw_to_map(vehicle.position),
                                          hw_heading_to_yaw(vehicle.heading), vehicle.speed,
                                          step * 0.1, 0.1)
        vehicle.act({"acceleration": accel, "steering": -steer})   # hw steering turns right
        vehicle.step(0.1)
        steering.append(steer)
        errors.append(abs(np.linalg.norm(hw_to_map(vehicle.position) - [0.0, radius]) - radius))
    return np.array(steering), np.array(errors)


def test_steering_on_a_slow_bend_is_steady():
    """At 5 m/s the look-ahead (4 m) is shorter than the wheelbase (5 m). Steering from the
    last step's motion direction then flipped every step with a growing amplitude (on the
    racetrack the closed loop fed planners lateral accelerations of 30 m/s^2). The steering
    must settle near the arc's, atan(2 tan(asin(L / 2R))), and the car stay on the arc."""
    for speed in (5.0, 12.0):
        steering, errors = _follow_arc(radius=25.0, speed=speed)
        expected = np.arctan(2 * np.tan(np.arcsin(5.0 / 2 / 25.0)))
        settled = steering[10:]
        assert np.abs(np.diff(settled)).max() < 0.02, (speed, np.round(settled, 3))
        np.testing.assert_allclose(settled.mean(), expected, rtol=0.15)
        assert errors.max() < 0.3, (speed, np.round(errors, 2))
