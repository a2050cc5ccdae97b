"""The inbox and the model lane's policy, without DDS: no queue growth, newest frame first,
cameras synced by stamp whatever the arrival order, planning before questions, deadlines,
cancellation, survival."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from ros_harness import stamp_msg
from std_msgs.msg import Header
from test_ros_planning import WAYPOINTS, Recorder, ScriptedPlanner, _config

from wamdiff2_core.decoding import DecodeCancelled, DecodeStats
from wamdiff2_core.planner import AnswerResult, PlanResult
from wamdiff2_ros.node import params
from wamdiff2_ros.node.scheduler import Scheduler
from wamdiff2_ros.node.worker import CameraImage, FrameJob, Inbox, QuestionJob, Settings

CONFIG = params.node_config({p.name: p.default for p in params.PARAMS})
SETTINGS = Settings(CONFIG, None, "straight")
RIG = Settings(replace(CONFIG, cameras=("front", "left"), camera_sync_tolerance_s=0.01,
                       camera_sync_wait_s=0.1), None, "straight")


def _image(stamp: float, value: int = 0, received: float | None = None) -> CameraImage:
    return CameraImage(np.full((2, 2, 3), value, np.uint8), Header(stamp=stamp_msg(stamp)),
                       stamp, time.monotonic() if received is None else received)


def test_the_inbox_keeps_only_the_newest_frame():
    inbox = Inbox()
    assert not inbox.put_image(0, _image(1.0), SETTINGS)
    assert inbox.put_image(0, _image(2.0), SETTINGS)                 # replaced = dropped
    assert inbox.put_image(0, _image(3.0), SETTINGS)
    job = inbox.ready_frame(time.monotonic())
    assert isinstance(job, FrameJob) and job.frame.stamp == 3.0 and job.gaps == ()
    assert inbox.ready_frame(time.monotonic()) is None                 # nothing behind


@pytest.mark.parametrize("side_after_s", [-0.05, 0.0, 0.005, 0.02, 0.05])
def test_a_trigger_waits_for_the_other_camera_whatever_the_arrival_order(side_after_s):
    """Equal stamps, the side image arriving before, with, or 5/20/50 ms after the trigger:
    the frame is ready the moment both are there, with both images, and not before."""
    inbox = Inbox()
    t0 = time.monotonic()
    if side_after_s <= 0:
        inbox.put_image(1, _image(10.0, 1, received=t0 + side_after_s), RIG)
    inbox.put_image(0, _image(10.0, 0, received=t0), RIG)
    if side_after_s > 0:
        assert inbox.ready_frame(t0 + side_after_s / 2) is None       # waits for it
        inbox.put_image(1, _image(10.0, 1, received=t0 + side_after_s), RIG)
    job = inbox.ready_frame(t0 + max(side_after_s, 0.0))
    assert job is not None and job.gaps == ()
    assert [int(im[0, 0, 0]) for im in job.frame.images] == [0, 1]


def test_the_wait_is_bounded_and_a_later_side_image_ends_it_early():
    inbox = Inbox()
    t0 = time.monotonic()
    inbox.put_image(1, _image(9.5, 1, received=t0), RIG)              # far too old
    inbox.put_image(0, _image(10.0, received=t0), RIG)
    assert inbox.ready_frame(t0 + 0.05) is None
    job = inbox.ready_frame(t0 + 0.1)                                  # the window is over
    assert [(g.camera, g.kind) for g in job.gaps] == [("left", "camera_late")]
    inbox.put_image(0, _image(11.0, received=t0), RIG)
    inbox.put_image(1, _image(11.5, 1, received=t0), RIG)             # past the trigger:
    job = inbox.ready_frame(t0)                                        # no nearer will come
    assert [g.kind for g in job.gaps] == ["camera_late"]


def test_other_cameras_are_gathered_to_the_triggers_stamp():
    """The frame of a trigger image holds each other camera's image nearest its stamp
    (within camera_sync_tolerance_s); a camera silent input_timeout_s is named missing."""
    settings = Settings(params.node_config(dict(
        {p.name: p.default for p in params.PARAMS}, cameras=["front", "left", "right"])),
        None, "straight")
    inbox = Inbox()
    inbox.put_image(1, _image(9.9, value=1), settings)
    inbox.put_image(2, _image(5.0, value=2), settings)                 # 5 s older: too old
    inbox.put_image(0, _image(10.0), settings)
    job = inbox.ready_frame(time.monotonic() + 1.0)
    assert [(g.camera, g.kind) for g in job.gaps] == [("right", "camera_missing")]
    assert [int(image[0, 0, 0]) for image in job.frame.images] == [0, 1]
    inbox.put_image(2, _image(10.05, value=2), settings)
    inbox.put_image(1, _image(10.12, value=1), settings)               # 9.9 is 0.2 s away
    inbox.put_image(0, _image(10.1), settings)
    job = inbox.ready_frame(time.monotonic())
    assert job.gaps == () and len(job.frame.images) == 3


# ------------------------------------------------------------------ the lane's policy
class Lane:
    """A Recorder's outputs driven by a running Scheduler over an Inbox."""

    def __init__(self, planner, max_questions: int = 8, **config):
        self.rec = Recorder(planner, _config(**config))
        self.inbox = Inbox(max_questions=max_questions)
        self.scheduler = Scheduler(self.inbox, self.rec.planning, self.rec.outputs,
                                   self.rec.crashes.append)
        self.settings = self.rec.settings

    def __enter__(self):
        self.scheduler.start()
        return self

    def __exit__(self, *exc):
        assert self.scheduler.stop(timeout=10)

    def frame(self, stamp: float) -> None:
        self.rec.now = stamp
        self.inbox.put_image(0, _image(stamp), self.settings)

    def question(self, text: str) -> None:
        dropped = self.inbox.put_question(text, self.settings)
        if dropped is not None:
            self.scheduler.refuse_dropped(dropped)

    def wait(self, predicate, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while not predicate() and time.monotonic() < end:
            time.sleep(0.005)
        assert predicate()


class Gated(ScriptedPlanner):
    """Plans at once; answers wait for `release` (or their cancel flag, as a decode
    does) and log what ran."""

    def __init__(self):
        super().__init__()
        self.release, self.ran = threading.Event(), []

    def plan(self, obs, cancel=None):
        self.ran.append(("plan", obs.stamp))
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    def answer(self, images, question, cancel=None):
        self.ran.append(("answer", question))
        while not self.release.is_set():
            if cancel is not None and cancel.is_set():
                raise DecodeCancelled(1)
            time.sleep(0.002)
        return AnswerResult(f"answer to {question}", DecodeStats())


def test_questions_wait_for_an_image_and_never_go_before_a_frame():
    planner = Gated()
    planner.release.set()
    with Lane(planner) as lane:
        lane.question("a?")
        time.sleep(0.1)
        assert planner.ran == []                                      # no image yet
        lane.inbox.put_question("b?", lane.settings)                  # queued behind
        lane.frame(1.0)
        lane.wait(lambda: len(lane.rec.sent["answer"]) == 2)
    assert planner.ran[0] == ("plan", 1.0)                            # the frame first
    assert [a.data for a in lane.rec.sent["answer"]] == ["answer to a?", "answer to b?"]


def test_a_frame_cancels_a_running_question_which_is_refused_with_its_reason():
    planner = Gated()
    with Lane(planner) as lane:
        lane.frame(1.0)
        lane.wait(lambda: len(lane.rec.sent["path"]) == 1)
        lane.question("slow?")
        lane.wait(lambda: ("answer", "slow?") in planner.ran)
        lane.frame(2.0)                                               # needs the model
        lane.wait(lambda: len(lane.rec.sent["path"]) == 2 and lane.rec.sent["answer"])
    assert [a.data for a in lane.rec.sent["answer"]] == [""]
    assert lane.rec.stats.counters["question_preempted"] == 1
    assert lane.rec.stats.counters["questions_refused"] == 1
    assert lane.rec.sources() == [("model", ""), ("model", "")]


def test_a_question_that_cannot_begin_in_time_is_refused_and_a_full_queue_drops():
    """A 20 Hz camera and answers expected to take longer than its period: the questions
    never fit between frames and are refused at question_timeout_s; every frame planned."""
    planner = Gated()
    with Lane(planner, question_timeout_s=0.3, max_questions=2) as lane:
        lane.scheduler.answer_time.add(0.2)                           # answers take 0.2 s
        stamp = 1.0
        for i in range(5):
            lane.frame(stamp)
            stamp += 0.05
            time.sleep(0.05)
        for text in ("a?", "b?", "c?"):
            lane.question(text)                                       # a? pushed out
        for _ in range(12):
            lane.frame(stamp)
            stamp += 0.05
            time.sleep(0.05)
        lane.wait(lambda: len(lane.rec.sent["answer"]) == 3)
    counters = lane.rec.stats.counters
    assert ("answer", "b?") not in planner.ran and ("answer", "c?") not in planner.ran
    assert counters["questions_dropped"] == 1 and counters["question_timeout"] == 2
    assert counters["questions_refused"] == 3
    assert [a.data for a in lane.rec.sent["answer"]] == ["", "", ""]
    assert all(source == "model" for source, _ in lane.rec.sources())


def test_the_lane_plans_newest_frames_and_survives_exceptions():
    release = threading.Event()

    def script(obs):
        if obs.stamp == 1.0:
            release.wait(2.0)                                         # a slow first plan
        if obs.stamp == 5.0:
            raise KeyError("model exploded")
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    planner = ScriptedPlanner(script)
    with Lane(planner, plan_timeout_s=0.0) as lane:
        lane.frame(1.0)
        lane.wait(lambda: planner.observations)
        dropped = sum(lane.inbox.put_image(0, _image(float(s)), lane.settings)
                      for s in range(2, 6))
        release.set()
        lane.wait(lambda: len(lane.rec.sent["path"]) == 2)
        lane.frame(7.0)
        lane.wait(lambda: len(lane.rec.sent["path"]) == 3)
    assert dropped == 3                                               # 2, 3, 4 replaced
    assert [o.stamp for o in planner.observations] == [1.0, 5.0, 7.0]
    assert lane.rec.sources() == [("model", ""), ("stop", "model_errors"), ("model", "")]
    assert lane.rec.crashes == []                                     # an outcome, no crash


def test_rate_limit_delays_frames_but_keeps_the_newest():
    planner = ScriptedPlanner()
    with Lane(planner, max_planning_rate_hz=5.0) as lane:
        lane.frame(1.0)
        lane.wait(lambda: len(lane.rec.sent["path"]) == 1)
        start = time.monotonic()
        lane.frame(2.0)
        lane.frame(3.0)
        lane.wait(lambda: len(lane.rec.sent["path"]) == 2)
        assert time.monotonic() - start >= 0.1
    assert [o.stamp for o in planner.observations] == [1.0, 3.0]


def test_a_frame_waiting_behind_one_long_forward_gets_its_fallback_at_its_deadline():
    """The lane is inside one forward that ignores the cancel flag (a prefill): the next
    frame does not wait for it: at its own deadline its fallback goes out, and the late
    plan of the first frame is dropped (one Path per frame, none late)."""
    release = threading.Event()

    def stuck(obs):
        release.wait(5.0)
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    planner = ScriptedPlanner(stuck)
    with Lane(planner, plan_timeout_s=0.05) as lane:
        lane.frame(1.0)
        lane.wait(lambda: len(lane.rec.sent["path"]) == 1)           # 1.0: its deadline
        sent = time.monotonic()
        lane.frame(1.5)
        lane.wait(lambda: len(lane.rec.sent["path"]) == 2)           # 1.5: its deadline,
        assert not release.is_set() and time.monotonic() - sent < 4.0   # not the lane's
        release.set()
        lane.wait(lambda: lane.scheduler.running is None)
    assert [o.stamp for o in planner.observations] == [1.0]           # 1.5 never planned
    assert lane.rec.sources() == [("stop", "plan_timeouts")] * 2
    stamps = [m.header.stamp for m in lane.rec.sent["path"]]
    assert stamps == [stamp_msg(1.0), stamp_msg(1.5)]


def test_the_watchdog_answers_a_frame_stuck_in_one_long_forward():
    """plan_timeout_s 0 (wait for the plan) and a model slower than max_path_gap_s: the
    watchdog publishes a fallback for the frame in flight (path_gaps, ERROR) and the late
    plan is dropped; no watchdog without frames arriving."""
    def stuck(obs):
        time.sleep(0.6)
        return PlanResult(WAYPOINTS, "text", DecodeStats())

    planner = ScriptedPlanner(stuck)
    with Lane(planner, plan_timeout_s=0.0) as lane:
        assert not lane.scheduler.watchdog(0.2)                       # no frames yet
        lane.frame(1.0)
        time.sleep(0.15)
        lane.frame(1.15)                                              # frames keep coming
        time.sleep(0.15)
        assert lane.scheduler.watchdog(0.2)
        assert not lane.scheduler.watchdog(0.2)                       # a Path just went out
        lane.wait(lambda: len(lane.rec.sent["path"]) == 2)
        time.sleep(0.5)
        assert not lane.scheduler.watchdog(0.2)                       # the camera stopped
    assert [o.stamp for o in planner.observations] == [1.0, 1.15]
    assert lane.rec.sources() == [("stop", "path_gaps"), ("model", "")]   # 1.0's plan dropped
    assert lane.rec.stats.counters["path_gaps"] == 1
    assert "the model has been planning frame 1.000" in lane.rec.sent["report"][0][1]
    assert lane.rec.sent["report"][0][0] == b"\x02"                   # ERROR


def test_the_node_leaves_the_interpreter_as_it_found_it(monkeypatch):
    """No process-wide switch: the GIL switch interval and the signal handlers of a caller
    that runs the node in its own process come back as they were."""
    import signal
    import sys

    from wamdiff2_ros.node import planner_node

    monkeypatch.setattr(planner_node, "_run", lambda args: 0)
    before = (sys.getswitchinterval(), signal.getsignal(signal.SIGINT),
              signal.getsignal(signal.SIGTERM))
    assert planner_node.main([]) == 0
    assert (sys.getswitchinterval(), signal.getsignal(signal.SIGINT),
            signal.getsignal(signal.SIGTERM)) == before
