"""Odometry -> velocity, acceleration and poses: differences of stamps, NaN guards, order."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nav_msgs.msg import Odometry
from ros_harness import stamp_msg

from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.odometry import OdometryTracker, sample_from_msg, yaw_from_quaternion


def _odom(t: float, vx: float = 0.0, vy: float = 0.0, x: float = 0.0, y: float = 0.0,
          yaw: float = 0.0) -> Odometry:
    msg = Odometry()
    msg.header.stamp, msg.header.frame_id = stamp_msg(t), "odom"
    msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), \
        math.cos(yaw / 2)
    msg.twist.twist.linear.x, msg.twist.twist.linear.y = vx, vy
    return msg


def test_velocity_from_twist_and_acceleration_from_successive_messages():
    tracker = OdometryTracker()
    assert tracker.motion().stamp is None and tracker.motion().velocity == (0.0, 0.0)
    tracker.update(sample_from_msg(_odom(10.0, vx=5.0, vy=0.5)))
    assert tracker.motion().acceleration == (0.0, 0.0)                # one message: none yet
    motion = tracker.update(sample_from_msg(_odom(10.5, vx=6.0, vy=0.0)))
    assert motion.velocity == (6.0, 0.0)
    assert motion.acceleration == pytest.approx((2.0, -1.0))
    assert motion.stamp == pytest.approx(10.5)


def test_a_long_gap_gives_no_acceleration_estimate():
    tracker = OdometryTracker(max_accel_gap_s=1.0)
    tracker.update(sample_from_msg(_odom(0.0, vx=1.0)))
    tracker.update(sample_from_msg(_odom(0.1, vx=2.0)))                # 10 m/s^2
    motion = tracker.update(sample_from_msg(_odom(5.0, vx=0.0)))
    assert motion.acceleration == pytest.approx((10.0, 0.0))          # kept, not -0.4


@pytest.mark.parametrize("field", ["twist.twist.linear.x", "twist.twist.linear.y",
                                   "pose.pose.position.x", "pose.pose.orientation.w"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_odometry_is_rejected_and_state_kept(field, value):
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(1.0, vx=3.0)))
    msg = _odom(1.1, vx=4.0)
    *parents, leaf = field.split(".")
    obj = msg
    for p in parents:
        obj = getattr(obj, p)
    setattr(obj, leaf, value)
    with pytest.raises(BadInput) as info:
        tracker.update(sample_from_msg(msg))
    assert info.value.kind == "odometry_nonfinite" and leaf in str(info.value)
    assert tracker.motion().velocity == (3.0, 0.0)


def test_zero_quaternion_and_out_of_order_messages_are_rejected():
    msg = _odom(1.0)
    msg.pose.pose.orientation.w = 0.0
    with pytest.raises(BadInput, match="zero quaternion"):
        sample_from_msg(msg)
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(2.0)))
    with pytest.raises(BadInput) as info:
        tracker.update(sample_from_msg(_odom(1.0)))
    assert info.value.kind == "odometry_out_of_order"


@given(st.floats(-math.pi + 1e-6, math.pi))
def test_yaw_round_trip(yaw):
    assert yaw_from_quaternion(0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)) == \
        pytest.approx(yaw, abs=1e-9)


def test_pose_at_interpolates_and_refuses_far_stamps():
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(1.0, x=0.0, yaw=3.0)))
    tracker.update(sample_from_msg(_odom(2.0, x=10.0, yaw=-3.0)))     # through +-pi
    frame, x, y, yaw = tracker.pose_at(1.5, tolerance_s=0.1)
    assert frame == "odom" and x == pytest.approx(5.0)
    assert math.cos(yaw) == pytest.approx(-1.0, abs=1e-3)              # the short way round
    assert tracker.pose_at(2.05, tolerance_s=0.1)[1] == pytest.approx(10.0)
    with pytest.raises(BadInput) as info:
        tracker.pose_at(3.0, tolerance_s=0.1)
    assert info.value.kind == "odometry_missing"
    with pytest.raises(BadInput):
        OdometryTracker().pose_at(1.0, tolerance_s=1.0)
