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
    for k, (pose, (x, y)) in enumerate(zip(path.poses, wp)):
        assert pose.header.stamp == outputs.stamp_plus(stamp, 0.5 * (k + 1))
        assert pose.header.frame_id == "base_link"
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
    header = Header(stamp=Time(sec=4, nanosec=2), frame_id="camera_front")
    msg = outputs.detections_msg([Detection((10, 20, 50, 40), "car", 0.75)], header)
    if not outputs.HAVE_VISION_MSGS:
        assert msg is None
        return
    from rclpy.serialization import deserialize_message, serialize_message

    back = deserialize_message(serialize_message(msg), type(msg))   # well-formed on the wire
    (det,) = back.detections
    assert back.header == header and det.header == header
    assert (det.bbox.center.position.x, det.bbox.center.position.y) == (30.0, 30.0)
    assert (det.bbox.size_x, det.bbox.size_y) == (40.0, 20.0)
    assert det.results[0].hypothesis.class_id == "car"
    assert det.results[0].hypothesis.score == pytest.approx(0.75)
    empty = outputs.detections_msg([], header)                      # a failed detection
    assert empty.detections == [] and empty.header == header


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


def test_pose_times_are_exact_and_carry_into_seconds():
    assert outputs.stamp_plus(Time(sec=1, nanosec=600_000_000), 0.5) == Time(sec=2,
                                                                            nanosec=100_000_000)
    assert outputs.stamp_plus(Time(sec=1, nanosec=999_999_999), 4.0) == Time(sec=5,
                                                                            nanosec=999_999_999)


def test_plan_status_says_where_the_path_came_from():
    msg = outputs.plan_status_msg(Time(sec=7, nanosec=5), "/ego/wamdiff2_planner: planner",
                                  "last_plan", "parse_failures", "left", age_s=0.5)
    assert msg.header.stamp == Time(sec=7, nanosec=5)
    status = msg.status[0]
    values = {kv.key: kv.value for kv in status.values}
    assert status.level == DiagnosticStatus.WARN and status.name.startswith("/ego/")
    assert status.message == "last_plan: parse_failures"
    assert values == {"source": "last_plan", "reason": "parse_failures", "command": "left",
                      "stamp": "7.000000005", "plan_age_s": "0.500"}
    assert outputs.plan_status_msg(Time(), "n", "model", "", "left").status[0].level == \
        DiagnosticStatus.OK


@pytest.mark.parametrize("state,level", [("active", DiagnosticStatus.OK),
                                         ("unconfigured", DiagnosticStatus.WARN),
                                         ("inactive", DiagnosticStatus.WARN),
                                         ("finalized", DiagnosticStatus.ERROR)])
def test_the_lifecycle_state_sets_the_level(state, level):
    stats = NodeStats()
    stats.state = state
    got, message = stats.level_and_message()
    assert got == level and state in message


def test_a_failed_configure_is_an_error_until_a_configure_works():
    stats = NodeStats(window_s=0.0)
    stats.state = "unconfigured"
    stats.configure_error = "CheckpointError: no such checkpoint"
    time.sleep(0.01)                                    # long after any windowed problem
    assert stats.level_and_message() == (DiagnosticStatus.ERROR, "configure failed: "
                                         "CheckpointError: no such checkpoint")
    stats.configure_error, stats.state = None, "active"
    assert stats.level_and_message()[0] == DiagnosticStatus.OK


def test_standing_conditions_and_problems_combine():
    stats = NodeStats(window_s=60.0)
    stats.state = "active"
    stats.problem(DiagnosticStatus.WARN, "image_step", "step too small")
    level, message = stats.level_and_message([(DiagnosticStatus.WARN, "input_timeout: x")])
    assert level == DiagnosticStatus.WARN
    assert message == "input_timeout: x; image_step: step too small"
    # an at-once report is never below the standing conditions
    msg = diagnostic_array(stats, "n", "h", Time(), DiagnosticStatus.OK, "fine",
                           [(DiagnosticStatus.ERROR, "broken")])
    assert msg.status[0].level == DiagnosticStatus.ERROR


def test_diagnostic_messages_are_bounded():
    stats = NodeStats()
    stats.state = "active"
    stats.problem(DiagnosticStatus.WARN, "callback_errors", "x" * 100_000)
    msg = diagnostic_array(stats, "n", "h", Time())
    assert len(msg.status[0].message) <= 400
    msg = diagnostic_array(stats, "n", "h", Time(), DiagnosticStatus.WARN, "y" * 100_000)
    assert len(msg.status[0].message) <= 400


def test_silent_inputs_are_standing_warnings_while_planning():
    from wamdiff2_ros.node.health import InputHealth

    health = InputHealth()
    assert health.silent({"camera0": "/cam"}, 0.01) == []             # not planning yet
    health.start()
    time.sleep(0.05)
    (warning,) = health.silent({"camera0": "/cam"}, 0.01)
    assert warning[0] == DiagnosticStatus.WARN and "/cam" in warning[1]
    assert "none since activation" in warning[1]
    health.seen("camera0")
    assert health.silent({"camera0": "/cam"}, 10.0) == []
    assert health.silent({"camera0": "/cam"}, 0.0) == []               # 0: never
    health.stop()
    assert health.silent({"camera0": "/cam"}, 0.001) == []


def test_a_long_silence_escalates_from_warning_to_error():
    import time

    from wamdiff2_ros.node.diagnostics import ERROR, WARN
    from wamdiff2_ros.node.health import InputHealth

    health = InputHealth()
    health.start()
    time.sleep(0.05)
    (warning,) = health.silent({"camera0": "/cam"}, 0.01, error_s=10.0)
    assert warning[0] == WARN and "input_timeout_s 0.01" in warning[1]
    (error,) = health.silent({"camera0": "/cam"}, 0.01, error_s=0.02)
    assert error[0] == ERROR and "input_timeout_error_s 0.02" in error[1]
    (warning,) = health.silent({"camera0": "/cam"}, 0.01, error_s=0.0)   # 0: never ERROR
    assert warning[0] == WARN


def test_problems_age_out_of_the_status_level():
    stats = NodeStats(window_s=0.0)
    stats.state = "active"
    stats.problem(DiagnosticStatus.ERROR, "model_errors", "boom")
    time.sleep(0.01)
    assert stats.level_and_message()[0] == DiagnosticStatus.OK
    assert stats.counters["model_errors"] == 1                         # counters stay
