"""The worker-side handler on planner results, in process.

The success branch (a Path) needs a model whose answers parse; until the bundled model
exists, `ScriptedPlanner` stands in for `Planner` with the same methods, returning real
`PlanResult`s / raising the real `AnswerParseError`, so the ROS side of a successful plan is
tested in CI. The same paths run over DDS with the bundled model in test_ros_node_io.py.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import replace

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from ros_harness import stamp_msg
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

from wamdiff2_core.decoding import DecodeStats
from wamdiff2_core.planner import AnswerResult, DetectResult, PlanResult
from wamdiff2_core.tasks import AnswerParseError, Detection
from wamdiff2_ros.node import params
from wamdiff2_ros.node.diagnostics import NodeStats
from wamdiff2_ros.node.odometry import OdometrySample, OdometryTracker
from wamdiff2_ros.node.planning import Outputs, PlanningHandler
from wamdiff2_ros.node.worker import Frame

WAYPOINTS = np.array([[2.0 * (i + 1), 0.1 * (i + 1)] for i in range(8)])


class ScriptedPlanner:
    """Planner's plan/detect/answer, answering from a script instead of a model."""

    def __init__(self, plan=None):
        self.plan_script = plan or (lambda obs: PlanResult(WAYPOINTS, "text",
                                                           DecodeStats(decode_ms=40.0,
                                                                       tokens=80,
                                                                       forwards=20)))
        self.observations = []

    def plan(self, obs):
        self.observations.append(obs)
        return self.plan_script(obs)

    def detect(self, images):
        return DetectResult([Detection((10, 20, 60, 50), "car", 0.9)], "[]", DecodeStats())

    def answer(self, images, question):
        return AnswerResult(f"answer to {question}", DecodeStats())


class Recorder:
    def __init__(self):
        self.sent: dict[str, list] = {k: [] for k in ("path", "markers", "answer",
                                                       "detections", "report")}

    def outputs(self) -> Outputs:
        return Outputs(*(lambda msg, k=k: self.sent[k].append(msg)
                         for k in ("path", "markers", "answer", "detections")),
                       report=lambda level, message: self.sent["report"].append(
                           (level, message)))


def _config(**changes) -> params.NodeConfig:
    cfg = params.node_config({p.name: p.default for p in params.PARAMS})
    return replace(cfg, **changes)


def _frame(stamp: float) -> Frame:
    header = Header(stamp=stamp_msg(stamp), frame_id="camera_front")
    return Frame((np.zeros((36, 64, 3), np.uint8),), header, stamp, time.monotonic())


def _handler(planner, config, odometry=None, command="left"):
    rec, stats = Recorder(), NodeStats()
    handler = PlanningHandler(lambda: planner, lambda: config, lambda: command,
                              odometry or OdometryTracker(), stats, rec.outputs(),
                              logging.getLogger("test"))
    return handler, rec, stats


def test_a_plan_becomes_an_8_pose_path_and_markers_with_the_image_stamp():
    planner = ScriptedPlanner()
    handler, rec, stats = _handler(planner, _config())
    handler.on_frame(_frame(100.25), now_s=100.3)
    (path,) = rec.sent["path"]
    assert len(path.poses) == 8 and path.header.frame_id == "base_link"
    assert path.header.stamp == stamp_msg(100.25)
    assert [p.pose.position.x for p in path.poses] == pytest.approx(WAYPOINTS[:, 0])
    (markers,) = rec.sent["markers"]
    status = [m for m in markers.markers if m.ns == "wamdiff2/status"][0]
    assert status.text.startswith("left:") and status.header.stamp == path.header.stamp
    assert any(m.type == Marker.LINE_STRIP for m in markers.markers)
    assert planner.observations[0].command == "left"
    assert stats.counters["paths_published"] == 1 and stats.last_frame_stamp == 100.25
    assert list(stats.tokens_per_forward) == [4.0]


def test_odom_path_uses_the_pose_at_the_image_stamp():
    odometry = OdometryTracker()
    for t, x in ((9.0, 0.0), (11.0, 20.0)):
        odometry.update(OdometrySample(t, "odom", (x, 5.0), math.pi / 2, (10.0, 0.0)))
    handler, rec, _ = _handler(ScriptedPlanner(), _config(path_in_odom=True), odometry)
    handler.on_frame(_frame(10.0), now_s=10.1)
    (path,) = rec.sent["path"]
    assert path.header.frame_id == "odom"
    first = path.poses[0].pose.position
    assert (first.x, first.y) == pytest.approx((10.0 - 0.1, 5.0 + 2.0))  # rotated by +90 deg


def test_no_odometry_pose_means_no_odom_path_and_a_warning():
    handler, rec, stats = _handler(ScriptedPlanner(), _config(path_in_odom=True))
    handler.on_frame(_frame(10.0), now_s=10.1)
    assert rec.sent["path"] == [] and stats.counters["odometry_missing"] == 1
    assert rec.sent["report"][0][0] == DiagnosticStatus.WARN
    assert len(rec.sent["markers"]) == 1                               # "no plan" status


@pytest.mark.parametrize("error,kind", [
    (AnswerParseError("planning", "1,2,x", "not a number"), "parse_failures"),
    (RuntimeError("CUDA out of memory"), "model_errors"),
])
def test_a_failed_plan_is_reported_and_the_next_frame_planned(error, kind):
    calls = []

    def script(obs):
        calls.append(obs.stamp)
        if len(calls) == 1:
            raise error
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    handler, rec, stats = _handler(ScriptedPlanner(script), _config())
    handler.on_frame(_frame(1.0), now_s=1.0)
    handler.on_frame(_frame(2.0), now_s=2.0)
    assert stats.counters[kind] == 1
    assert rec.sent["report"][0][0] == DiagnosticStatus.ERROR and kind in \
        rec.sent["report"][0][1]
    assert [m.header.stamp for m in rec.sent["path"]] == [stamp_msg(2.0)]
    assert len(rec.sent["markers"]) == 2 and stats.counters["frames_planned"] == 2


def test_stale_frames_are_dropped_before_planning():
    planner = ScriptedPlanner()
    handler, rec, stats = _handler(planner, _config(max_input_age_s=0.5))
    handler.on_frame(_frame(10.0), now_s=11.0)
    assert planner.observations == [] and stats.counters["stale_frames"] == 1
    assert rec.sent["markers"] == []


def test_detection_and_questions():
    handler, rec, stats = _handler(ScriptedPlanner(), _config(tasks=frozenset(
        {"planning", "detection"})))
    handler.on_frame(_frame(5.0), now_s=5.0)
    boxes = [m for m in rec.sent["markers"][0].markers if m.type == Marker.LINE_LIST]
    assert len(boxes) == 1 and boxes[0].header.frame_id == "camera_front"
    assert len(rec.sent["detections"]) == 1          # None where vision_msgs is missing
    handler.on_question("what is ahead?", _frame(5.0))
    assert rec.sent["answer"][0].data == "answer to what is ahead?"
    assert stats.counters["questions_answered"] == 1
