"""One definition of plausible ego motion (issue 45): the node's odometry limits default to
the core's bounds (`wamdiff2_core.tasks.motion`, which `wamdiff2 plan` applies too) and
refuse with the core's sentence."""
from __future__ import annotations

import pytest
from nav_msgs.msg import Odometry

from wamdiff2_core import tasks
from wamdiff2_ros.node import params
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.odometry import OdometryTracker, sample_from_msg


def _odom(t: float, vx: float) -> Odometry:
    msg = Odometry()
    msg.header.stamp.sec, msg.header.stamp.nanosec = int(t), int(t % 1 * 1e9)
    msg.pose.pose.orientation.w, msg.twist.twist.linear.x = 1.0, vx
    return msg


def test_the_node_defaults_are_the_core_bounds():
    defaults = {p.name: p.default for p in params.PARAMS}
    assert defaults["max_speed_mps"] == tasks.MAX_SPEED_MPS
    assert defaults["max_accel_mps2"] == tasks.MAX_ACCEL_MPS2


def test_the_node_refuses_with_the_core_sentence():
    with pytest.raises(BadInput) as info:
        sample_from_msg(_odom(1.0, 1e300), tasks.MAX_SPEED_MPS)
    assert str(info.value) == "odometry speed 1e+300 m/s exceeds max_speed_mps 70 m/s"
    tracker = OdometryTracker()
    tracker.update(sample_from_msg(_odom(1.0, 10.0)), tasks.MAX_ACCEL_MPS2)
    with pytest.raises(BadInput) as info:
        tracker.update(sample_from_msg(_odom(1.1, 60.0)), tasks.MAX_ACCEL_MPS2)
    assert info.value.kind == "odometry_implausible"
    assert str(info.value) == ("odometry acceleration (over 0.100 s) 500 m/s^2 exceeds "
                               "max_accel_mps2 20 m/s^2")
