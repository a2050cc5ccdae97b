"""Planning off the receiving callbacks: a newest-frame slot and the thread that drains it.

Receiving callbacks only convert and `put`; the worker thread plans. The slot holds one
frame: a frame that arrives while another waits replaces it (and is counted as dropped),
so the queue never grows and every plan starts from the newest frame there is. Questions
wait in a short queue of their own and are answered on the latest frame.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Frame:
    """One planning input: the images of every camera at (about) one time."""

    images: tuple[np.ndarray, ...]    # (H, W, 3) uint8 RGB per camera, trigger camera first
    header: Any                       # std_msgs/Header of the trigger camera's image
    stamp: float                      # that header's stamp, seconds
    received: float                   # time.monotonic() when the trigger image arrived


class WorkQueue:
    """The newest unplanned frame, the latest frame seen, and pending questions."""

    def __init__(self, max_questions: int = 8):
        self._cond = threading.Condition()
        self._pending: Frame | None = None
        self._latest: Frame | None = None
        self._questions: deque[str] = deque(maxlen=max_questions)
        self._closed = False

    def put_frame(self, frame: Frame) -> Frame | None:
        """Offer a frame; returns the unplanned frame it replaced (now dropped), if any."""
        with self._cond:
            replaced, self._pending, self._latest = self._pending, frame, frame
            self._cond.notify_all()
        return replaced

    def put_question(self, question: str) -> str | None:
        """Queue a question; returns the oldest one if the queue was full (now dropped)."""
        with self._cond:
            dropped = self._questions[0] if len(self._questions) == \
                self._questions.maxlen else None
            self._questions.append(question)
            self._cond.notify_all()
        return dropped

    def latest(self) -> Frame | None:
        with self._cond:
            return self._latest

    def take(self, frames_not_before: float, timeout: float) -> tuple[str, Any] | None:
        """The next job: ("question", (text, frame)) first, else ("frame", frame).

        Questions are served once any frame has arrived; frames only from monotonic time
        `frames_not_before` on (the planning rate limit). None after `timeout` seconds with
        nothing to do, or once closed.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._questions and self._latest is not None:
                    return "question", (self._questions.popleft(), self._latest)
                if self._pending is not None and now >= frames_not_before:
                    frame, self._pending = self._pending, None
                    return "frame", frame
                wake = deadline if self._pending is None else min(deadline, frames_not_before)
                if now >= deadline:
                    return None
                self._cond.wait(max(0.0, wake - now))
        return None

    def close(self) -> None:
        """Wake every waiter; `take` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class PlanningWorker:
    """A thread that takes jobs from a WorkQueue and hands them to the node's handlers.

    `min_period` is read before each frame (0: no rate limit), so a parameter change applies
    to the next frame. Handlers must not raise; if one does anyway, `on_crash` is told and
    the loop goes on: the worker outlives any single job.
    """

    def __init__(self, queue: WorkQueue, on_frame: Callable[[Frame], None],
                 on_question: Callable[[str, Frame], None], min_period: Callable[[], float],
                 on_crash: Callable[[BaseException], None]):
        self._queue = queue
        self._on_frame, self._on_question = on_frame, on_question
        self._min_period, self._on_crash = min_period, on_crash
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wamdiff2-planner",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> bool:
        """Ask the loop to end after the current job; True if it ended within `timeout`."""
        self._stop.set()
        self._queue.close()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        next_frame_at = 0.0
        while not self._stop.is_set():
            job = self._queue.take(next_frame_at, timeout=0.5)
            if job is None:
                continue
            kind, payload = job
            try:
                if kind == "frame":
                    next_frame_at = time.monotonic() + self._min_period()
                    self._on_frame(payload)
                else:
                    self._on_question(*payload)
            except Exception as exc:  # noqa: BLE001 - the worker must survive any job
                self._on_crash(exc)
