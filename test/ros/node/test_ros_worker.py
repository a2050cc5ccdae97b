"""The newest-frame slot and the planning thread: no queue growth, newest first, survival."""
from __future__ import annotations

import threading
import time

import numpy as np

from wamdiff2_ros.node.worker import Frame, PlanningWorker, WorkQueue


def _frame(stamp: float) -> Frame:
    return Frame((np.zeros((2, 2, 3), np.uint8),), None, stamp, time.monotonic())


def test_the_slot_keeps_only_the_newest_frame():
    q = WorkQueue()
    assert q.put_frame(_frame(1.0)) is None
    assert q.put_frame(_frame(2.0)).stamp == 1.0                       # replaced = dropped
    assert q.put_frame(_frame(3.0)).stamp == 2.0
    kind, frame = q.take(0.0, timeout=0.1)
    assert (kind, frame.stamp) == ("frame", 3.0)
    assert q.take(0.0, timeout=0.05) is None                           # nothing queued behind
    assert q.latest().stamp == 3.0                                     # kept for questions


def test_questions_wait_for_an_image_and_come_first():
    q = WorkQueue(max_questions=2)
    q.put_question("a?")
    assert q.take(0.0, timeout=0.05) is None                           # no image yet
    q.put_frame(_frame(1.0))
    assert q.put_question("b?") is None
    assert q.put_question("c?") == "a?"                                # full: oldest dropped
    assert q.take(0.0, 0.1)[0] == "question"
    assert q.take(0.0, 0.1)[1][0] == "c?"
    assert q.take(0.0, 0.1)[0] == "frame"


def test_rate_limit_delays_frames_but_keeps_the_newest():
    q = WorkQueue()
    q.put_frame(_frame(1.0))
    start = time.monotonic()
    assert q.take(start + 0.2, timeout=0.05) is None                   # not yet allowed
    q.put_frame(_frame(2.0))
    kind, frame = q.take(start + 0.2, timeout=1.0)
    assert frame.stamp == 2.0 and time.monotonic() - start >= 0.19


def test_worker_plans_newest_frames_survives_exceptions_and_stops():
    q = WorkQueue()
    planned, crashes = [], []
    release = threading.Event()

    def on_frame(frame):
        planned.append(frame.stamp)
        if frame.stamp == 1.0:
            release.wait(2.0)                                          # a slow first plan
        if frame.stamp == 5.0:
            raise RuntimeError("model exploded")

    worker = PlanningWorker(q, on_frame, lambda text, frame: None, lambda: 0.0,
                            crashes.append)
    worker.start()
    q.put_frame(_frame(1.0))
    deadline = time.monotonic() + 2.0
    while not planned and time.monotonic() < deadline:
        time.sleep(0.01)
    dropped = sum(q.put_frame(_frame(float(s))) is not None for s in range(2, 6))
    release.set()
    deadline = time.monotonic() + 2.0
    while len(planned) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    q.put_frame(_frame(7.0))
    deadline = time.monotonic() + 2.0
    while planned[-1] != 7.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dropped == 3                                                # 2, 3, 4 replaced
    assert planned == [1.0, 5.0, 7.0]                                  # newest, then on
    assert len(crashes) == 1 and "exploded" in str(crashes[0])
    assert worker.stop(timeout=2.0)


def test_the_node_runs_with_a_short_gil_switch_interval(monkeypatch):
    """The planning thread takes the GIL back sooner from the executor's threads while the
    node runs; a caller's own interval comes back after (docs/ros.md, "Threads")."""
    import sys

    from wamdiff2_ros.node import planner_node

    seen = []
    monkeypatch.setattr(planner_node, "_run", lambda args: seen.append(sys.getswitchinterval()) or 0)
    before = sys.getswitchinterval()
    assert planner_node.main([]) == 0
    assert seen == [planner_node.GIL_SWITCH_INTERVAL_S]
    assert planner_node.GIL_SWITCH_INTERVAL_S < before
    assert sys.getswitchinterval() == before
