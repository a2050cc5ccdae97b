"""The frame slot and the planning thread: no queue growth, newest first, frames gathered
across cameras, survival."""
from __future__ import annotations

import threading
import time

import numpy as np

from wamdiff2_ros.node import params
from wamdiff2_ros.node.worker import (CameraImage, FrameJob, FrameSlot, PlanningWorker,
                                      QuestionJob, Settings)

CONFIG = params.node_config({p.name: p.default for p in params.PARAMS})
SETTINGS = Settings(CONFIG, None, "straight")


def _image(stamp: float, value: int = 0) -> CameraImage:
    return CameraImage(np.full((2, 2, 3), value, np.uint8), None, stamp, time.monotonic())


def test_the_slot_keeps_only_the_newest_frame():
    slot = FrameSlot()
    assert not slot.put_image(0, _image(1.0), SETTINGS)
    assert slot.put_image(0, _image(2.0), SETTINGS)                  # replaced = dropped
    assert slot.put_image(0, _image(3.0), SETTINGS)
    job = slot.take(0.0, timeout=0.1)
    assert isinstance(job, FrameJob) and job.frame.stamp == 3.0 and job.gaps == ()
    assert slot.take(0.0, timeout=0.05) is None                        # nothing queued behind


def test_questions_wait_for_an_image_and_come_first():
    slot = FrameSlot(max_questions=2)
    slot.put_question("a?", SETTINGS)
    assert slot.take(0.0, timeout=0.05) is None                        # no image yet
    slot.put_image(0, _image(1.0), SETTINGS)
    assert slot.put_question("b?", SETTINGS) is None
    assert slot.put_question("c?", SETTINGS) == "a?"                   # full: oldest dropped
    first = slot.take(0.0, 0.1)
    assert isinstance(first, QuestionJob) and first.frame.stamp == 1.0
    assert slot.take(0.0, 0.1).question == "c?"
    assert isinstance(slot.take(0.0, 0.1), FrameJob)


def test_rate_limit_delays_frames_but_keeps_the_newest():
    slot = FrameSlot()
    slot.put_image(0, _image(1.0), SETTINGS)
    start = time.monotonic()
    assert slot.take(start + 0.2, timeout=0.05) is None                # not yet allowed
    slot.put_image(0, _image(2.0), SETTINGS)
    job = slot.take(start + 0.2, timeout=1.0)
    assert job.frame.stamp == 2.0 and time.monotonic() - start >= 0.19


def test_other_cameras_are_gathered_to_the_triggers_stamp():
    """The frame of a trigger image holds each other camera's image nearest its stamp
    (within camera_sync_tolerance_s); a camera silent input_timeout_s is named missing."""
    settings = Settings(params.node_config(dict(
        {p.name: p.default for p in params.PARAMS}, cameras=["front", "left", "right"])),
        None, "straight")
    slot = FrameSlot()
    slot.put_image(1, _image(9.9, value=1), settings)
    slot.put_image(2, _image(5.0, value=2), settings)                  # 5 s older: too old
    slot.put_image(0, _image(10.0), settings)
    job = slot.take(0.0, 0.1)
    assert [(g.camera, g.kind) for g in job.gaps] == [("right", "camera_missing")]
    assert [int(image[0, 0, 0]) for image in job.frame.images] == [0, 1]
    slot.put_image(2, _image(10.05, value=2), settings)
    slot.put_image(1, _image(10.12, value=1), settings)                # 9.9 is 0.2 s away
    slot.put_image(0, _image(10.1), settings)
    job = slot.take(0.0, 0.1)
    assert job.gaps == () and len(job.frame.images) == 3


def test_worker_plans_newest_frames_survives_exceptions_and_stops():
    slot = FrameSlot()
    planned, crashes = [], []
    release = threading.Event()

    def run_job(job):
        planned.append(job.frame.stamp)
        if job.frame.stamp == 1.0:
            release.wait(2.0)                                          # a slow first plan
        if job.frame.stamp == 5.0:
            raise RuntimeError("model exploded")

    worker = PlanningWorker(slot, run_job, crashes.append)
    worker.start()
    slot.put_image(0, _image(1.0), SETTINGS)
    deadline = time.monotonic() + 2.0
    while not planned and time.monotonic() < deadline:
        time.sleep(0.01)
    dropped = sum(slot.put_image(0, _image(float(s)), SETTINGS) for s in range(2, 6))
    release.set()
    deadline = time.monotonic() + 2.0
    while len(planned) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    slot.put_image(0, _image(7.0), SETTINGS)
    deadline = time.monotonic() + 2.0
    while planned[-1] != 7.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dropped == 3                                                # 2, 3, 4 replaced
    assert planned == [1.0, 5.0, 7.0]                                  # newest, then on
    assert len(crashes) == 1 and "exploded" in str(crashes[0])
    assert worker.stop(timeout=2.0)


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
