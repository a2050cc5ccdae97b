"""Planning off the receiving callbacks: the frame slot, and the thread that drains it.

Receiving callbacks only convert and `put`; the worker thread plans. The slot keeps each
camera's newest image; a trigger-camera image that arrives while another waits replaces it
(counted as dropped), so nothing queues and every plan starts from the newest frame there
is. The other cameras' images are gathered to the trigger's stamp when a frame is taken
(`gather`). Questions wait in a short queue of their own and are answered on the latest
frame. Every job carries the settings in force when it arrived (`Settings`).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from wamdiff2_ros.node.params import NodeConfig


@dataclass(frozen=True)
class Settings:
    """What a job is planned with: the node's config, planner and command when it arrived."""

    config: NodeConfig
    planner: Any                      # wamdiff2_core.planner.Planner (None: not configured)
    command: str


@dataclass(frozen=True)
class CameraImage:
    """One converted camera message."""

    rgb: np.ndarray                   # (H, W, 3) uint8 RGB
    header: Any                       # its std_msgs/Header
    stamp: float                      # that header's stamp, seconds
    received: float                   # time.monotonic() on arrival


@dataclass(frozen=True)
class Frame:
    """One planning input: the images of every camera at (about) one time."""

    images: tuple[np.ndarray, ...]    # (H, W, 3) uint8 RGB per camera, trigger camera first
    header: Any                       # std_msgs/Header of the trigger camera's image
    stamp: float                      # that header's stamp, seconds
    received: float                   # time.monotonic() when the trigger image arrived


@dataclass(frozen=True)
class FrameJob:
    frame: Frame
    missing: tuple[str, ...]          # cameras with no image near the trigger's stamp
    settings: Settings


@dataclass(frozen=True)
class QuestionJob:
    question: str
    frame: Frame
    settings: Settings


def gather(trigger: CameraImage, others: dict[int, CameraImage], config: NodeConfig
           ) -> tuple[Frame, tuple[str, ...]]:
    """The frame of `trigger` with each other camera's image, and the names of the cameras
    whose newest image is not within `max_input_age_s` of the trigger's stamp (0: any)."""
    images, missing = [trigger.rgb], []
    for index, name in enumerate(config.cameras[1:], start=1):
        image = others.get(index)
        if image is None or (config.max_input_age_s > 0 and
                             abs(image.stamp - trigger.stamp) > config.max_input_age_s):
            missing.append(name)
        else:
            images.append(image.rgb)
    return Frame(tuple(images), trigger.header, trigger.stamp, trigger.received), \
        tuple(missing)


class FrameSlot:
    """The newest unplanned trigger image, each camera's newest image, pending questions."""

    def __init__(self, max_questions: int = 8):
        self._cond = threading.Condition()
        self._pending: tuple[CameraImage, Settings] | None = None
        self._newest: dict[int, CameraImage] = {}         # camera -> its newest image
        self._questions: deque[tuple[str, Settings]] = deque(maxlen=max_questions)
        self._closed = False

    def put_image(self, camera: int, image: CameraImage, settings: Settings) -> bool:
        """Offer camera `camera`'s image (0 triggers planning); True when it replaced an
        unplanned trigger image (now dropped)."""
        with self._cond:
            self._newest[camera] = image
            if camera != 0:
                return False
            replaced = self._pending is not None
            self._pending = (image, settings)
            self._cond.notify_all()
        return replaced

    def put_question(self, question: str, settings: Settings) -> str | None:
        """Queue a question; returns the oldest one if the queue was full (now dropped)."""
        with self._cond:
            full = len(self._questions) == self._questions.maxlen
            dropped = self._questions[0][0] if full else None
            self._questions.append((question, settings))
            self._cond.notify_all()
        return dropped

    def take(self, frames_not_before: float, timeout: float) -> FrameJob | QuestionJob | None:
        """The next job: a question first (on the newest frame, once an image of the
        trigger camera has arrived), else the pending frame from monotonic time
        `frames_not_before` on (the planning rate limit). None after `timeout` seconds with
        nothing to do, or once closed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                others = {k: v for k, v in self._newest.items() if k != 0}
                if self._questions and 0 in self._newest:
                    question, settings = self._questions.popleft()
                    frame, _ = gather(self._newest[0], others, settings.config)
                    return QuestionJob(question, frame, settings)
                if self._pending is not None and now >= frames_not_before:
                    (trigger, settings), self._pending = self._pending, None
                    frame, missing = gather(trigger, others, settings.config)
                    return FrameJob(frame, missing, settings)
                if now >= deadline:
                    return None
                wake = deadline if self._pending is None else min(deadline, frames_not_before)
                self._cond.wait(max(0.0, wake - now))
        return None

    def clear(self) -> None:
        """Forget every image and question (deactivate); `take` works again after."""
        with self._cond:
            self._pending, self._closed = None, False
            self._newest.clear()
            self._questions.clear()

    def close(self) -> None:
        """Wake every waiter; `take` returns None until `clear`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class PlanningWorker:
    """A thread that takes jobs from a FrameSlot and hands them to `run_job`.

    `run_job` must not raise; if it does anyway, `on_crash` is told and the loop goes on:
    the worker outlives any single job. A frame job starts the planning-rate wait
    (`max_planning_rate_hz` of its settings).
    """

    def __init__(self, slot: FrameSlot, run_job: Callable[[FrameJob | QuestionJob], None],
                 on_crash: Callable[[BaseException], None]):
        self._slot, self._run_job, self._on_crash = slot, run_job, on_crash
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wamdiff2-planner",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> bool:
        """Ask the loop to end after the current job; True if it ended within `timeout`."""
        self._stop.set()
        self._slot.close()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        next_frame_at = 0.0
        while not self._stop.is_set():
            job = self._slot.take(next_frame_at, timeout=0.5)
            if job is None:
                continue
            if isinstance(job, FrameJob):
                rate = job.settings.config.max_planning_rate_hz
                next_frame_at = time.monotonic() + (1.0 / rate if rate > 0 else 0.0)
            try:
                self._run_job(job)
            except Exception as exc:  # noqa: BLE001 - the worker must survive any job
                self._on_crash(exc)
