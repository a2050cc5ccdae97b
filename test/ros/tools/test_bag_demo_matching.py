"""How the demo ties the node's outputs to replayed frames, and when it stops waiting.

Real serialized messages (Path, MarkerArray, DiagnosticArray) in a list standing in for the
live recorder, so the timing cases run in a second without a node."""
from __future__ import annotations

import time

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.serialization import serialize_message
from visualization_msgs.msg import Marker, MarkerArray

from wamdiff2_ros.node import outputs
from wamdiff2_ros.node.odometry import EgoMotion
from wamdiff2_ros.tools.bag_frames import BagFrame
from wamdiff2_ros.tools.bag_layout import TYPES, OutputTopics
from wamdiff2_ros.tools.bag_record import image_msg
from wamdiff2_ros.tools.demo import FrameMatcher, FrameOutcome
from wamdiff2_ros.tools.demo_graph import Received

OUT = OutputTopics()
CAMERA = "/camera/front/image_raw"
STAMPS = [10**18 + k * 5 * 10**8 for k in range(3)]


class Recorded:
    """The two methods of OutputRecorder the matcher uses, over a fixed list."""

    def __init__(self, items: list[Received]):
        self.items = items

    def messages(self, topic: str | None = None) -> list[Received]:
        return [r for r in self.items if topic is None or r.topic == topic]

    def wait(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


def _time(ns: int) -> Time:
    return Time(sec=ns // 10**9, nanosec=ns % 10**9)


def _path(stamp: int, at: float) -> Received:
    msg = outputs.path_msg(np.arange(16.0).reshape(8, 2), _time(stamp), "base_link")
    return Received(OUT.path, TYPES["path"], at, serialize_message(msg))


def _status(stamp: int, at: float, source: str) -> Received:
    msg = outputs.plan_status_msg(_time(stamp), "/wamdiff2_planner: planner", source,
                                  "" if source == "model" else "parse_failures", "straight")
    return Received(OUT.status, TYPES["diagnostics"], at, serialize_message(msg))


def _markers(stamp: int, at: float) -> Received:
    status = Marker(ns="wamdiff2/status", id=0, type=Marker.TEXT_VIEW_FACING, text="x")
    status.header.stamp = _time(stamp)
    return Received(OUT.markers, TYPES["markers"], at,
                    serialize_message(MarkerArray(markers=[Marker(action=Marker.DELETEALL),
                                                           status])))


def _diagnostics(at: float, **counters: int) -> Received:
    status = DiagnosticStatus(name="wamdiff2_planner: planner", values=[
        KeyValue(key=k, value=str(v)) for k, v in counters.items()])
    return Received("/diagnostics", TYPES["diagnostics"], at,
                    serialize_message(DiagnosticArray(status=[status])))


def _matcher() -> tuple[FrameMatcher, dict]:
    frames = [BagFrame(index=i, stamp_ns=s, log_ns=s, header=None, rgb=None, bad_input=None,
                       command="straight", motion=EgoMotion(), truth=None)
              for i, s in enumerate(STAMPS)]
    outcomes = {f.stamp_ns: FrameOutcome(f) for f in frames}
    matcher = FrameMatcher(outcomes, CAMERA)
    rgb = np.zeros((4, 4, 3), np.uint8)
    for k, stamp in enumerate(STAMPS):                  # frame k goes out at 100 + k s
        matcher.on_publish(CAMERA, stamp, serialize_message(image_msg(rgb, stamp)), 100.0 + k)
    return matcher, outcomes


def test_outputs_are_matched_by_stamp_and_a_frame_never_answered_is_dropped():
    matcher, outcomes = _matcher()
    recorder = Recorded([_path(STAMPS[0], 100.25), _status(STAMPS[0], 100.25, "model"),
                         _markers(STAMPS[0], 100.26),
                         _path(STAMPS[2], 102.4), _status(STAMPS[2], 102.4, "stop"),
                         _markers(STAMPS[2], 102.5),
                         _diagnostics(103.0, frames_received=3, frames_planned=2,
                                      dropped_frames=1)])
    assert matcher.drain(recorder, timeout_s=30.0) == "idle"    # no waiting for the timeout
    first, second, third = (outcomes[s] for s in STAMPS)
    assert first.status == "planned" and first.latency_ms == 250.0
    np.testing.assert_array_equal(first.waypoints, np.arange(16.0).reshape(8, 2))
    assert second.status == "dropped" and second.latency_ms is None
    # a fallback Path is the node's answer, not the model's plan
    assert third.status == "no plan" and third.waypoints is None
    assert third.latency_ms == pytest.approx(400.0)


def test_waits_while_the_node_still_has_a_frame_and_stops_at_the_timeout():
    matcher, outcomes = _matcher()
    recorder = Recorded([_markers(STAMPS[0], 100.1),
                         _diagnostics(101.0, frames_received=3, frames_planned=1,
                                      dropped_frames=1)])
    assert matcher.drain(recorder, timeout_s=1.5) == "timeout"
    assert [outcomes[s].status for s in STAMPS] == ["no plan", "dropped", "dropped"]


def test_every_frame_answered_ends_the_wait_at_once():
    matcher, _ = _matcher()
    recorder = Recorded([_markers(s, 101.0) for s in STAMPS])
    assert matcher.drain(recorder, timeout_s=30.0) == "answered"


def test_an_idle_node_is_not_the_end_while_a_path_it_counts_published_is_on_its_way():
    """Topics arrive apart: the counters report the third frame planned while its Path (a
    packet to resend) has not arrived. Waiting goes on; the frame is not called dropped."""
    matcher, outcomes = _matcher()
    items = [m for s in STAMPS[:2] for m in (_path(s, 100.2), _status(s, 100.2, "model"),
                                              _markers(s, 100.3))]
    items.append(_diagnostics(103.0, frames_received=3, frames_planned=3, paths_published=3))
    recorder = Recorded(items)
    assert matcher.drain(recorder, timeout_s=2.0) == "timeout"
    items += [_path(STAMPS[2], 105.0), _status(STAMPS[2], 105.0, "model"),
              _markers(STAMPS[2], 105.1)]
    assert matcher.drain(recorder, timeout_s=30.0) == "answered"
    assert [outcomes[s].status for s in STAMPS] == ["planned"] * 3
