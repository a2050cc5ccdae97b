"""The planning path and its publishing, in process: a frame -> one outcome -> one publish,
each job run by the scheduler's `run` on the test's thread (its deadline supervisor running).

`ScriptedPlanner` stands in for `Planner` with the same methods, returning real
`PlanResult`s / raising the real `AnswerParseError` and `PromptTooLong`, so every branch of
the ROS side (a plan, each fallback, a timeout, a refusal) is tested without waiting for a
model; `RecordingNode` stands in for the node as the factory of the result publishers and
keeps what each publishes. The same paths run over DDS with the bundled model in
test_ros_node_io.py.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from ros_harness import stamp_msg
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

from wamdiff2_core.decoding import DecodeCancelled, DecodeStats
from wamdiff2_core.planner import AnswerResult, DetectResult, PlanResult
from wamdiff2_core.tasks import AnswerParseError, Detection
from wamdiff2_core.types import PromptTooLong
from wamdiff2_ros.node import outputs, params
from wamdiff2_ros.node.diagnostics import NodeStats, Reporter
from wamdiff2_ros.node.logs import ThrottledLog
from wamdiff2_ros.node.odometry import OdometrySample, OdometryTracker
from wamdiff2_ros.node.planning import Planning
from wamdiff2_ros.node.publishing import NodeOutputs
from wamdiff2_ros.node.scheduler import Scheduler
from wamdiff2_ros.node.worker import (CameraImage, Frame, FrameJob, Inbox, QuestionJob,
                                      Settings)

WAYPOINTS = np.array([[2.0 * (i + 1), 0.1 * (i + 1)] for i in range(8)])


class ScriptedPlanner:
    """Planner's plan/detect/answer, answering from a script instead of a model."""

    def __init__(self, plan=None):
        self.plan_script = plan or (lambda obs: PlanResult(WAYPOINTS, "text",
                                                           DecodeStats(decode_ms=40.0,
                                                                       tokens=80,
                                                                       forwards=20)))
        self.observations = []
        self.cancel = None                       # the cancel flag of the running plan

    def plan(self, obs, cancel=None):
        self.observations.append(obs)
        self.cancel = cancel
        return self.plan_script(obs)

    def detect(self, images, cancel=None):
        return DetectResult([Detection((10, 20, 60, 50), "car", 0.9)], "[]", DecodeStats())

    def answer(self, images, question, cancel=None):
        return AnswerResult(f"answer to {question}", DecodeStats())


class _Publisher:
    def __init__(self, sent: list):
        self._sent = sent

    def publish(self, msg) -> None:
        self._sent.append(msg)


class RecordingNode:
    """The node as NodeOutputs sees it: a factory of publishers, each keeping what it is
    given under its topic's last name (path, markers, answer, status, stats, detections,
    processing_time_ms)."""

    def __init__(self):
        self.sent: dict[str, list] = defaultdict(list)

    def create_lifecycle_publisher(self, msg_type, topic: str, qos):
        return _Publisher(self.sent[topic.rsplit("/", 1)[-1]])


class Recorder:
    """One node's planning path wired as the node wires it; `sent` holds every message and
    `sent["report"]` each immediate /diagnostics report as (level, message)."""

    def __init__(self, planner, config, odometry=None, command="left", logger=None):
        self.node, self.stats = RecordingNode(), NodeStats()
        self.sent = self.node.sent
        log = ThrottledLog(logger or logging.getLogger("test"), lambda: 0.0)
        self.reporter = Reporter(_Publisher(self.sent["report"]), self.stats, log,
                                 lambda level, message: (level, message))
        odometry = odometry or OdometryTracker()
        self.outputs = NodeOutputs(self.node, self.stats, self.reporter, odometry,
                                   "/wamdiff2_planner: planner")
        self.now = 0.0
        self.planning = Planning(odometry, lambda: self.now, log)
        self.settings = Settings(config, planner, command)
        self.crashes: list = []
        self.scheduler = Scheduler(Inbox(), self.planning, self.outputs, self.crashes.append)
        self.scheduler.start(lane=False)

    def on_frame(self, frame: Frame, now_s: float) -> None:
        self.now = now_s
        self.scheduler.run(FrameJob(frame, (), self.settings))

    def on_question(self, question: str, frame: Frame) -> None:
        self.scheduler.run(QuestionJob(question, frame, (), self.settings))

    def sources(self) -> list[tuple[str, str]]:
        """(source, reason) of every ~/output/status message sent."""
        out = []
        for msg in self.sent["status"]:
            values = {kv.key: kv.value for kv in msg.status[0].values}
            out.append((values["source"], values["reason"]))
        return out


def _stats_values(msg) -> dict[str, str]:
    (status,) = msg.status
    return {kv.key: kv.value for kv in status.values}


def _config(**changes) -> params.NodeConfig:
    """The shipped defaults, odometry not required unless a test asks for it."""
    cfg = params.node_config({p.name: p.default for p in params.PARAMS})
    return replace(cfg, **dict({"max_odometry_age_s": 0.0}, **changes))


def _frame(stamp: float) -> Frame:
    header = Header(stamp=stamp_msg(stamp), frame_id="camera_front")
    return Frame((np.zeros((36, 64, 3), np.uint8),), header, stamp, time.monotonic())


def _handler(planner, config, odometry=None, command="left", logger=None):
    rec = Recorder(planner, config, odometry, command, logger)
    return rec, rec, rec.stats


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


def test_no_odometry_pose_means_an_ego_frame_path_and_a_warning():
    handler, rec, stats = _handler(ScriptedPlanner(), _config(path_in_odom=True))
    handler.on_frame(_frame(10.0), now_s=10.1)
    (path,) = rec.sent["path"]
    assert path.header.frame_id == "base_link" and stats.counters["odometry_missing"] == 1
    assert rec.sent["report"][0][0] == DiagnosticStatus.WARN
    assert "published in base_link" in rec.sent["report"][0][1]


def test_poses_carry_their_own_times():
    handler, rec, _ = _handler(ScriptedPlanner(), _config())
    handler.on_frame(_frame(100.25), now_s=100.3)
    (path,) = rec.sent["path"]
    assert [p.header.stamp for p in path.poses] == [stamp_msg(100.25 + 0.5 * (k + 1))
                                                   for k in range(8)]


@pytest.mark.parametrize("error,kind", [
    (AnswerParseError("planning", "1,2,x", "not a number"), "parse_failures"),
    (RuntimeError("CUDA out of memory"), "model_errors"),
])
def test_a_failed_plan_publishes_the_last_plan_re_timed_then_a_stop(error, kind):
    """Frame 1 plans; frames 2 and 3 fail: frame 2 (0.5 s later) gets the last plan re-timed,
    frame 3 (1.5 s after the plan, beyond fallback_max_age_s 1.0) a stop."""
    calls = []

    def script(obs):
        calls.append(obs.stamp)
        if len(calls) > 1:
            raise error
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    handler, rec, stats = _handler(ScriptedPlanner(script), _config())
    for t in (1.0, 1.5, 2.5):
        handler.on_frame(_frame(t), now_s=t)
    assert rec.sources() == [("model", ""), ("last_plan", kind), ("stop", kind)]
    assert [p.header.stamp for p in rec.sent["path"]] == [stamp_msg(t) for t in (1.0, 1.5,
                                                                                 2.5)]
    retimed = [(p.pose.position.x, p.pose.position.y) for p in rec.sent["path"][1].poses]
    # The plan (a straight line, 2 m forward and 0.1 m left per 0.5 s) seen 0.5 s on, from
    # the ego on it and facing along it: one step shorter, then held at its end.
    step = math.hypot(2.0, 0.1)
    expected = np.array([(step * min(k + 1, 7), 0.0) for k in range(8)])
    assert np.allclose(np.array(retimed), expected, atol=1e-9), retimed
    stop = [p.pose.position.x for p in rec.sent["path"][2].poses]
    assert stop == [0.0] * 8                                         # no odometry: speed 0
    assert stats.counters[kind] == 2 and stats.counters["fallback_paths"] == 2
    assert stats.counters["fallback_last_plan"] == 1 and stats.counters["fallback_stop"] == 1
    assert rec.sent["report"][0][0] == DiagnosticStatus.ERROR and kind in \
        rec.sent["report"][0][1]
    status = [[m.text for m in a.markers if m.ns == "wamdiff2/status"][0]
              for a in rec.sent["markers"]]
    assert status[1] == f"left: last_plan ({kind})" and status[2] == f"left: stop ({kind})"
    levels = [m.status[0].level for m in rec.sent["status"]]
    assert levels == [DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR]


def test_the_stop_brakes_from_the_odometry_speed():
    odometry = OdometryTracker()
    odometry.update(OdometrySample(0.9, "odom", (0.0, 0.0), 0.0, (10.0, 0.0)))
    handler, rec, _ = _handler(ScriptedPlanner(lambda obs: (_ for _ in ()).throw(
        RuntimeError("boom"))), _config(fallback="stop", stop_decel_mps2=5.0), odometry)
    handler.on_frame(_frame(1.0), now_s=1.0)
    xs = [p.pose.position.x for p in rec.sent["path"][0].poses]
    assert xs[0] == pytest.approx(10 * 0.5 - 2.5 * 0.25) and xs[-1] == pytest.approx(10.0)
    assert xs == sorted(xs)                                            # never backwards


def test_stale_odometry_publishes_the_fallback_without_planning():
    odometry = OdometryTracker()
    odometry.update(OdometrySample(8.0, "odom", (0.0, 0.0), 0.0, (5.0, 0.0)))
    planner = ScriptedPlanner()
    handler, rec, stats = _handler(planner, _config(max_odometry_age_s=0.5), odometry)
    handler.on_frame(_frame(10.0), now_s=10.0)                       # odometry 2 s older
    assert planner.observations == [] and rec.sources() == [("stop", "odometry_stale")]
    assert stats.counters["odometry_stale"] == 1
    assert "2.00 s older" in rec.sent["report"][0][1]
    odometry.update(OdometrySample(10.9, "odom", (0.0, 0.0), 0.0, (5.0, 0.0)))
    handler.on_frame(_frame(11.0), now_s=11.0)                       # fresh again: planned
    assert rec.sources()[-1] == ("model", "") and len(planner.observations) == 1
    assert planner.observations[0].velocity == (5.0, 0.0)
    # no odometry at all
    handler, rec, stats = _handler(ScriptedPlanner(), _config(max_odometry_age_s=0.5))
    handler.on_frame(_frame(1.0), now_s=1.0)
    assert rec.sources() == [("stop", "odometry_stale")]
    assert "no odometry yet" in rec.sent["report"][0][1]


def test_a_plan_past_the_timeout_is_cancelled_and_its_fallback_goes_out_at_the_deadline():
    """plan_timeout_s after the frame arrived the fallback is published at once, while the
    model still decodes, and the decode's cancel flag is set; the decode stops (here: the
    scripted planner raises DecodeCancelled as the engine does) and publishes nothing."""
    published_at_cancel = []

    def cooperative(obs):
        assert planner.cancel.wait(30), "the deadline never cancelled the decode"
        published_at_cancel.append(len(rec.sent["path"]))
        raise DecodeCancelled(3)

    planner = ScriptedPlanner(cooperative)
    handler, rec, stats = _handler(planner, _config(plan_timeout_s=0.05))
    frame = _frame(3.0)
    handler.on_frame(frame, now_s=3.0)               # returns once the decode stopped
    assert published_at_cancel == [1]                # the fallback was out before
    assert rec.sources() == [("stop", "plan_timeouts")] and len(rec.sent["path"]) == 1
    assert stats.counters["plan_timeouts"] == 1 and len(rec.sent["markers"]) == 1
    (late,) = rec.sent["stats"]
    assert (_stats_values(late)["planning.source"], _stats_values(late)["planning.failure"]) \
        == ("stop", "plan_timeouts")
    assert "cancelled" in rec.sent["report"][0][1]
    assert rec.crashes == []


def test_a_late_result_is_dropped_and_a_frame_past_its_deadline_is_not_planned():
    """A decode that ends after its deadline anyway (one long forward) publishes nothing:
    the frame already got its fallback. A frame taken after its deadline gets the fallback
    without the model running (never a late or stale plan)."""
    def slow(obs):
        time.sleep(0.3)                              # ignores the flag: one long forward
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    planner = ScriptedPlanner(slow)
    handler, rec, stats = _handler(planner, _config(plan_timeout_s=0.05))
    handler.on_frame(_frame(3.0), now_s=3.0)
    assert rec.sources() == [("stop", "plan_timeouts")] and len(rec.sent["stats"]) == 1
    assert planner.cancel.is_set()
    old = replace(_frame(4.0), received=time.monotonic() - 1.0)     # waited 1 s already
    handler.on_frame(old, now_s=4.0)
    assert len(planner.observations) == 1                           # not asked again
    assert rec.sources()[-1] == ("stop", "plan_timeouts")
    handler.settings = replace(handler.settings, config=_config(plan_timeout_s=30.0))
    handler.on_frame(_frame(5.0), now_s=5.0)
    assert rec.sources()[-1] == ("model", "") and stats.counters["plan_timeouts"] == 2
    assert len(rec.sent["path"]) == 3                                # one per frame


def test_one_logger_warns_and_errors_in_any_order():
    """rclpy refuses a call site whose severity changes ("Logger severity cannot be changed
    between calls"): a stale frame (WARN) between parse failures (ERROR) must not make either
    fail or be counted as the other."""
    import rclpy.logging

    def bad(obs):
        raise AnswerParseError("planning", "x", "not a number")

    logger = rclpy.logging.get_logger("wamdiff2_test_severity")
    handler, rec, stats = _handler(ScriptedPlanner(bad), _config(max_input_age_s=0.5),
                                   logger=logger)
    handler.on_frame(_frame(1.0), now_s=1.0)                         # ERROR parse failure
    handler.on_frame(_frame(1.0), now_s=5.0)                         # WARN stale
    handler.on_frame(_frame(6.0), now_s=6.0)                         # ERROR again
    handler.on_frame(_frame(6.0), now_s=9.0)                         # WARN again
    assert stats.counters["parse_failures"] == 2 and stats.counters["stale_frames"] == 2
    assert stats.counters["model_errors"] == 0 and len(rec.sent["path"]) == 2


def test_stale_frames_are_dropped_before_planning():
    planner = ScriptedPlanner()
    handler, rec, stats = _handler(planner, _config(max_input_age_s=0.5))
    handler.on_frame(_frame(10.0), now_s=11.0)
    assert planner.observations == [] and stats.counters["stale_frames"] == 1
    assert rec.sent["markers"] == [] and rec.sent["path"] == []


def test_failed_detection_and_refused_questions_publish_explicit_empty_results():
    class Failing(ScriptedPlanner):
        def detect(self, images, cancel=None):
            raise AnswerParseError("detection", "[{", "truncated")

        def answer(self, images, question, cancel=None):
            if question == "long":
                raise PromptTooLong(5000, 128, 4096)
            raise RuntimeError("boom")

    handler, rec, stats = _handler(Failing(), _config(tasks=frozenset({"planning",
                                                                      "detection"})))
    handler.on_frame(_frame(5.0), now_s=5.0)
    if outputs.HAVE_VISION_MSGS:                   # else there is no message to publish
        assert rec.sent["detections"][0].detections == []
    assert stats.counters["parse_failures"] == 1 and len(rec.sent["path"]) == 1
    handler.on_question("long", _frame(5.0))
    handler.on_question("what?", _frame(5.0))
    assert [a.data for a in rec.sent["answer"]] == ["", ""]
    assert stats.counters["question_too_long"] == 1 and stats.counters["questions_refused"] == 1
    assert stats.counters["model_errors"] == 1 and stats.counters["answer_failures"] == 1
    assert stats.counters["parse_failures"] == 1          # the detection's, not an answer's
    assert "5000 tokens" in rec.sent["report"][1][1]


def test_an_answer_that_fails_to_parse_is_an_answer_failure_not_a_planning_one():
    class Blank(ScriptedPlanner):
        def answer(self, images, question, cancel=None):
            raise AnswerParseError("qa", "  ", "empty answer")

    handler, rec, stats = _handler(Blank(), _config())
    handler.on_question("what colour is the sky?", _frame(5.0))
    assert [a.data for a in rec.sent["answer"]] == [""]
    assert stats.counters["answer_failures"] == 1 and stats.counters["parse_failures"] == 0
    assert stats.counters["answer_parse_failures"] == 1


def test_detection_and_questions():
    handler, rec, stats = _handler(ScriptedPlanner(), _config(tasks=frozenset(
        {"planning", "detection"})))
    handler.on_frame(_frame(5.0), now_s=5.0)
    boxes = [m for m in rec.sent["markers"][0].markers if m.type == Marker.LINE_LIST]
    assert len(boxes) == 1 and boxes[0].header.frame_id == "camera_front"
    # the Detection2DArray too where vision_msgs is installed; without it, markers only
    assert len(rec.sent["detections"]) == (1 if outputs.HAVE_VISION_MSGS else 0)
    handler.on_question("what is ahead?", _frame(5.0))
    assert rec.sent["answer"][0].data == "answer to what is ahead?"
    assert stats.counters["questions_answered"] == 1


def test_every_planned_frame_publishes_its_stats_with_the_image_stamp():
    """~/output/stats: what a closed-loop driver needs to tell the model's plan from a
    failure (and the fallback Path published for it) and to price the decode (tokens,
    forwards), stamped like the Path."""
    calls = []

    def script(obs):
        calls.append(obs.stamp)
        if len(calls) == 2:
            exc = AnswerParseError("planning", "1,2,x", "not a number")
            exc.stats = DecodeStats(tokens=30, forwards=9, denoise_forwards=8, blocks=1)
            raise exc
        return PlanResult(WAYPOINTS, "text", DecodeStats(tokens=80, forwards=20,
                                                         denoise_forwards=17, blocks=3))

    handler, rec, _ = _handler(ScriptedPlanner(script), _config())
    handler.on_frame(_frame(1.5), now_s=1.5)
    handler.on_frame(_frame(2.0), now_s=2.0)
    ok, failed = rec.sent["stats"]
    assert ok.header.stamp == stamp_msg(1.5) and failed.header.stamp == stamp_msg(2.0)
    assert ok.status[0].level == DiagnosticStatus.OK
    values = _stats_values(ok)
    assert (values["planning.parsed"], values["planning.published"]) == ("true", "true")
    assert (values["planning.tokens"], values["planning.forwards"],
            values["planning.denoise_forwards"], values["planning.blocks"]) == (
        "80", "20", "17", "3")
    assert values["planning.failure"] == "" and values["command"] == "left"
    assert values["planning.source"] == "model"
    assert failed.status[0].level == DiagnosticStatus.ERROR
    values = _stats_values(failed)
    assert (values["planning.parsed"], values["planning.published"],
            values["planning.source"], values["planning.failure"]) == (
        "false", "true", "last_plan", "parse_failures")      # the fallback went out
    assert values["planning.forwards"] == "9" and values["planning.text"] == "1,2,x"
    assert "did not parse" in failed.status[0].message
    # the stamp exactly as the header has it (not a float to nine digits)
    frame = _frame(0.0)
    frame = replace(frame, header=Header(stamp=stamp_msg(0.0)))
    frame.header.stamp.sec, frame.header.stamp.nanosec = 1796520000, 88639314
    handler.on_frame(replace(frame, stamp=1796520000.088639314), now_s=1796520000.1)
    assert _stats_values(rec.sent["stats"][-1])["stamp"] == "1796520000.088639314"
    assert len(rec.sent["processing_time_ms"]) == 3
    assert all(m.data > 0 for m in rec.sent["processing_time_ms"])


def test_stopping_waits_for_a_forward_in_flight():
    """A plan still inside its forward when the lane stops is waited for: a process that
    exits while the model's thread is inside torch aborts instead of ending cleanly."""
    finished = []

    def slow(obs):
        time.sleep(0.5)
        finished.append(obs)
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    rec = Recorder(ScriptedPlanner(slow), _config(plan_timeout_s=0.05))
    inbox = Inbox()
    scheduler = Scheduler(inbox, rec.planning, rec.outputs, rec.crashes.append)
    scheduler.start()
    inbox.put_image(0, CameraImage(np.zeros((36, 64, 3), np.uint8),
                                   Header(stamp=stamp_msg(3.0)), 3.0, time.monotonic()),
                    rec.settings)
    give_up = time.monotonic() + 5
    while not rec.sent["path"] and time.monotonic() < give_up:
        time.sleep(0.01)
    assert rec.sources() == [("stop", "plan_timeouts")] and not finished
    assert scheduler.stop(timeout=10) and len(finished) == 1
    assert scheduler.stop(timeout=1)                # a second stop is harmless
    assert len(rec.sent["path"]) == 1
