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


def test_a_frame_reads_the_motion_at_its_own_stamp():
    """The frame is the timing anchor: between two samples the velocity is interpolated
    and the acceleration is that interval's, stamped with the frame; after the newest
    sample, the newest motion with its own stamp (its age shows); before the oldest, the
    oldest; nothing yet: zeros, stamp None."""
    tracker = OdometryTracker()
    assert tracker.motion_at(5.0).stamp is None
    for t, vx in ((10.0, 4.0), (10.5, 6.0), (11.0, 6.0)):
        tracker.update(sample_from_msg(_odom(t, vx=vx)))
    between = tracker.motion_at(10.25)
    assert between.velocity == pytest.approx((5.0, 0.0)) and between.stamp == 10.25
    assert between.acceleration == pytest.approx((4.0, 0.0))           # 10.0 -> 10.5
    assert tracker.motion_at(10.75).acceleration == pytest.approx((0.0, 0.0))
    assert tracker.motion_at(10.5).velocity == pytest.approx((6.0, 0.0))
    after = tracker.motion_at(11.4)
    assert after.stamp == pytest.approx(11.0) and after == tracker.motion()
    assert tracker.motion_at(9.0).velocity == (4.0, 0.0)
    assert tracker.motion() == tracker.motion_at(12.0)                 # the newest sample


def test_acceleration_on_a_curve_is_the_ground_frame_one_in_the_body_frame():
    """A steady left turn at constant speed: the body-frame twist never changes, but the
    acceleration is centripetal, v * yaw_rate to the left, as the simulator computes it for
    the training data (map-frame differences of velocity turned into the ego frame)."""
    speed, yaw_rate, dt = 10.0, 0.3, 0.1
    tracker = OdometryTracker()
    for k in range(3):
        motion = tracker.update(sample_from_msg(_odom(k * dt, vx=speed, yaw=k * dt * yaw_rate)))
    turn = dt * yaw_rate                # the earlier velocity, seen in the later body frame:
    sim_like = (speed - speed * math.cos(turn)) / dt, speed * math.sin(turn) / dt
    assert motion.acceleration == pytest.approx(sim_like)
    assert motion.acceleration[1] == pytest.approx(speed * yaw_rate, rel=0.01)


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
    with pytest.raises(BadInput, match="zero quaternion") as info:
        sample_from_msg(msg)
    assert info.value.kind == "odometry_orientation"       # its own counter, refused
    msg.pose.pose.orientation.w = 1e-6
    with pytest.raises(BadInput, match="no rotation"):
        sample_from_msg(msg)
    msg.pose.pose.orientation.w = 0.5                      # not normalised: still a rotation
    assert sample_from_msg(msg).yaw == 0.0
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(2.0)))
    with pytest.raises(BadInput) as info:
        tracker.update(sample_from_msg(_odom(1.0)))
    assert info.value.kind == "odometry_out_of_order"


def test_implausible_speed_and_acceleration_are_rejected_and_state_kept():
    tracker = OdometryTracker()
    with pytest.raises(BadInput) as info:
        sample_from_msg(_odom(1.0, vx=1e300), max_speed_mps=70.0)
    assert info.value.kind == "odometry_implausible" and "max_speed_mps" in str(info.value)
    tracker.update(sample_from_msg(_odom(1.0, vx=10.0)), max_accel_mps2=20.0)
    with pytest.raises(BadInput) as info:                     # 60 m/s in 0.1 s: 500 m/s^2
        tracker.update(sample_from_msg(_odom(1.1, vx=60.0), max_speed_mps=70.0),
                       max_accel_mps2=20.0)
    assert info.value.kind == "odometry_implausible" and "acceleration" in str(info.value)
    assert tracker.motion().velocity == (10.0, 0.0)
    motion = tracker.update(sample_from_msg(_odom(1.2, vx=11.0)), max_accel_mps2=20.0)
    assert motion.acceleration == pytest.approx((5.0, 0.0))        # the next good one


def test_nearly_equal_stamps_give_no_infinite_acceleration():
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(1.0, vx=1.0)))
    motion = tracker.update(sample_from_msg(_odom(1.0 + 1e-9, vx=50.0)), max_accel_mps2=20.0)
    assert motion.acceleration == (0.0, 0.0) and motion.velocity == (50.0, 0.0)


def test_a_backwards_jump_of_time_starts_a_new_history():
    """A bag loop or a simulator reset: stamps restart; odometry keeps being accepted."""
    tracker = OdometryTracker()
    for t in (100.0, 100.1, 100.2):
        tracker.update(sample_from_msg(_odom(t, vx=5.0, x=t)))
    with pytest.raises(BadInput):                             # slight disorder: rejected
        tracker.update(sample_from_msg(_odom(99.9, vx=5.0)))
    motion = tracker.update(sample_from_msg(_odom(3.0, vx=2.0, x=1.0)))   # time restarted
    assert tracker.resets == 1 and motion.velocity == (2.0, 0.0)
    assert motion.acceleration == (0.0, 0.0) and motion.stamp == pytest.approx(3.0)
    assert tracker.pose_at(3.0, tolerance_s=0.1)[1] == pytest.approx(1.0)
    tracker.update(sample_from_msg(_odom(3.1, vx=2.5)))
    assert tracker.motion().acceleration == pytest.approx((5.0, 0.0))


def test_reset_forgets_everything():
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(50.0, vx=5.0)))
    tracker.reset()
    assert tracker.motion().stamp is None
    tracker.update(sample_from_msg(_odom(1.0, vx=1.0)))              # older: accepted now
    assert tracker.motion().velocity == (1.0, 0.0)


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
