"""Path, markers, detections and diagnostics built from planner results."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticStatus
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

from wamdiff2_core.tasks import Detection
from wamdiff2_ros.node import outputs
from wamdiff2_ros.node.diagnostics import COUNTERS, NodeStats, diagnostic_array


def _yaw(q) -> float:
    return 2.0 * math.atan2(q.z, q.w)


def test_path_has_one_pose_per_waypoint_with_headings_and_the_given_stamp():
    wp = np.array([[1.0 * (i + 1), 0.5 * (i + 1)] for i in range(8)])
    stamp = Time(sec=12, nanosec=345)
    path = outputs.path_msg(wp, stamp, "base_link")
    assert len(path.poses) == 8 and path.header.frame_id == "base_link"
    assert path.header.stamp == stamp
    for pose, (x, y) in zip(path.poses, wp):
        assert pose.header.stamp == stamp and pose.header.frame_id == "base_link"
        assert (pose.pose.position.x, pose.pose.position.y) == pytest.approx((x, y))
        assert _yaw(pose.pose.orientation) == pytest.approx(math.atan2(0.5, 1.0))
    # every pose has a header of its own: editing one leaves the path and the others alone
    path.poses[0].header.frame_id = "edited"
    assert path.header.frame_id == path.poses[1].header.frame_id == "base_link"


def test_standing_still_keeps_the_previous_heading():
    wp = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    assert outputs.headings(wp) == pytest.approx([math.pi / 2] * 3)
    assert outputs.headings(np.zeros((8, 2))) == pytest.approx([0.0] * 8)


def test_odom_path_is_placed_with_the_ego_pose():
    wp = np.array([[1.0, 0.0], [2.0, 0.0]])
    path = outputs.path_msg(wp, Time(), "odom", origin=(10.0, 5.0, math.pi / 2))
    p = [(q.pose.position.x, q.pose.position.y) for q in path.poses]
    assert p == [pytest.approx((10.0, 6.0)), pytest.approx((10.0, 7.0))]
    assert _yaw(path.poses[0].pose.orientation) == pytest.approx(math.pi / 2)


def test_markers_clear_then_draw_path_and_detections():
    path = outputs.path_msg(np.ones((8, 2)).cumsum(0), Time(sec=3), "base_link")
    header = Header(stamp=Time(sec=3), frame_id="camera_front")
    dets = [Detection(box=(10, 20, 110, 70), label="car", score=0.8)]
    markers = outputs.path_markers(path) + outputs.detection_markers(dets, header, 200, 100)
    array = outputs.marker_array(markers)
    assert array.markers[0].action == Marker.DELETEALL
    line = [m for m in array.markers if m.type == Marker.LINE_STRIP][0]
    assert len(line.points) == 8 and line.header.frame_id == "base_link"
    assert sum(m.type == Marker.ARROW and m.action == Marker.ADD
               for m in array.markers) == 8
    boxes = [m for m in array.markers if m.type == Marker.LINE_LIST][0]
    assert len(boxes.points) == 8 and boxes.header.frame_id == "camera_front"
    assert boxes.points[0].x == pytest.approx((10 - 100) / 200)      # left edge on the plane
    assert [m.text for m in array.markers if m.type == Marker.TEXT_VIEW_FACING] == \
        ["car 0.80"]
    assert outputs.detection_markers([], header, 200, 100) == []


def test_detections_message_only_where_vision_msgs_exists():
    msg = outputs.detections_msg([Detection((0, 0, 4, 2), "car")], Header())
    if outputs.HAVE_VISION_MSGS:
        assert msg.detections[0].bbox.size_x == 4
    else:
        assert msg is None


def test_diagnostics_report_counters_latency_and_the_worst_recent_problem():
    stats = NodeStats(window_s=60.0)
    stats.state = "active"
    level, message = stats.level_and_message()
    assert level == DiagnosticStatus.OK and message == "active"
    stats.count("frames_received", 3)
    stats.planned(stamp=5.25, latency_ms=120.0, planner_ms=100.0, tokens_per_forward=2.5)
    stats.problem(DiagnosticStatus.ERROR, "parse_failures", "garbage")
    stats.problem(DiagnosticStatus.WARN, "image_step", "step too small", bad_input=True)
    msg = diagnostic_array(stats, "wamdiff2_planner: planner", "cpu", Time())
    status = msg.status[0]
    values = {kv.key: kv.value for kv in status.values}
    assert status.level == DiagnosticStatus.ERROR                     # worst in the window
    assert status.message == "image_step: step too small"             # newest
    assert set(COUNTERS) <= set(values)
    assert values["frames_received"] == "3" and values["parse_failures"] == "1"
    assert values["image_step"] == "1" and values["bad_input"] == "1"
    assert values["latency_ms.p95"] == "120.0" and values["tokens_per_forward"] == "2.50"
    assert values["last_frame_stamp"] == "5.250000000" and values["state"] == "active"


def test_problems_age_out_of_the_status_level():
    stats = NodeStats(window_s=0.0)
    stats.problem(DiagnosticStatus.ERROR, "model_errors", "boom")
    time.sleep(0.01)
    assert stats.level_and_message()[0] == DiagnosticStatus.OK
    assert stats.counters["model_errors"] == 1                         # counters stay
