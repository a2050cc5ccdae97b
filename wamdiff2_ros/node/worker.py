"""Planning off the receiving callbacks: the frame slot, and the thread that drains it.

Receiving callbacks only convert and `put`; the worker thread plans. The slot keeps each
camera's last few images; a trigger-camera image that arrives while another waits replaces
it (counted as dropped), so nothing queues and every plan starts from the newest frame there
is. The other cameras' images are gathered to the trigger's stamp when a frame is taken
(`gather`: each camera's image nearest that stamp, within `camera_sync_tolerance_s`; a
camera without one is a named gap, `camera_late` or `camera_missing`). Questions wait in a
short queue of their own and are answered on the latest frame. Every job carries the
settings in force when it arrived (`Settings`).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from wamdiff2_ros.node.params import NodeConfig

#: Images kept per camera to gather from (a 30 Hz camera: its last quarter second).
HISTORY = 8
CAMERA_MISSING, CAMERA_LATE = "camera_missing", "camera_late"


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
class CameraGap:
    """A camera without an image for a frame: which, what kind, and why in words."""

    camera: str
    kind: str                         # CAMERA_MISSING | CAMERA_LATE (the counter)
    reason: str


@dataclass(frozen=True)
class FrameJob:
    frame: Frame
    gaps: tuple[CameraGap, ...]       # cameras with no image near the trigger's stamp
    settings: Settings


@dataclass(frozen=True)
class QuestionJob:
    question: str
    frame: Frame
    gaps: tuple[CameraGap, ...]
    settings: Settings


def describe_gaps(gaps: Sequence[CameraGap]) -> tuple[str, str]:
    """The counter of a frame's gaps (camera_missing if any camera is, else camera_late)
    and what they are, in words (each camera named)."""
    kind = CAMERA_MISSING if any(g.kind == CAMERA_MISSING for g in gaps) else CAMERA_LATE
    return kind, "; ".join(f"camera {g.camera!r}: {g.reason}" for g in gaps)


def gather(trigger: CameraImage, others: dict[int, Sequence[CameraImage]],
           config: NodeConfig) -> tuple[Frame, tuple[CameraGap, ...]]:
    """`gather_images` with the node's `cameras`, `camera_sync_tolerance_s` and
    `input_timeout_s`."""
    return gather_images(trigger, others, config.cameras, config.camera_sync_tolerance_s,
                         config.input_timeout_s)


def gather_images(trigger: CameraImage, others: dict[int, Sequence[CameraImage]],
                  cameras: Sequence[str], tolerance: float, silent: float
                  ) -> tuple[Frame, tuple[CameraGap, ...]]:
    """The frame of `trigger` (camera `cameras[0]`) with each other camera's image nearest
    the trigger's stamp (`others[k]`: camera k's recent images), and the gaps: a camera with
    no image at all, or whose newest is `silent` s or more older than the trigger (0: never),
    is missing; one whose nearest image is further than `tolerance` s from the trigger's
    stamp is late. The frame's images are in camera order (a gap leaves its camera out: such
    a frame is not planned). `bag eval` gathers a bag's frames with it too."""
    images, gaps = [trigger.rgb], []
    first = cameras[0]
    for index, name in enumerate(cameras[1:], start=1):
        history = others.get(index, ())
        if not history:
            gaps.append(CameraGap(name, CAMERA_MISSING, "no image since activation"))
            continue
        newest = max(history, key=lambda im: im.stamp)
        if silent > 0 and trigger.stamp - newest.stamp >= silent:
            gaps.append(CameraGap(name, CAMERA_MISSING, f"no image for "
                                  f"{trigger.stamp - newest.stamp:.2f} s before the {first} "
                                  f"frame (input_timeout_s {silent:g})"))
            continue
        nearest = min(history, key=lambda im: abs(im.stamp - trigger.stamp))
        offset = nearest.stamp - trigger.stamp
        if abs(offset) > tolerance:
            gaps.append(CameraGap(name, CAMERA_LATE, f"its nearest image is {abs(offset):.3f} s "
                                  f"{'after' if offset > 0 else 'before'} the {first} frame "
                                  f"(camera_sync_tolerance_s {tolerance:g})"))
            continue
        images.append(nearest.rgb)
    return Frame(tuple(images), trigger.header, trigger.stamp, trigger.received), tuple(gaps)


class FrameSlot:
    """The newest unplanned trigger image, each camera's last `HISTORY` images, pending
    questions."""

    def __init__(self, max_questions: int = 8):
        self._cond = threading.Condition()
        self._pending: tuple[CameraImage, Settings] | None = None
        self._images: dict[int, deque[CameraImage]] = {}  # camera -> its last images
        self._questions: deque[tuple[str, Settings]] = deque(maxlen=max_questions)
        self._closed = False

    def put_image(self, camera: int, image: CameraImage, settings: Settings) -> bool:
        """Offer camera `camera`'s image (0 triggers planning); True when it replaced an
        unplanned trigger image (now dropped)."""
        with self._cond:
            self._images.setdefault(camera, deque(maxlen=HISTORY)).append(image)
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
                others = {k: tuple(v) for k, v in self._images.items() if k != 0}
                if self._questions and self._images.get(0):
                    question, settings = self._questions.popleft()
                    frame, gaps = gather(self._images[0][-1], others, settings.config)
                    return QuestionJob(question, frame, gaps, settings)
                if self._pending is not None and now >= frames_not_before:
                    (trigger, settings), self._pending = self._pending, None
                    frame, gaps = gather(trigger, others, settings.config)
                    return FrameJob(frame, gaps, settings)
                if now >= deadline:
                    return None
                wake = deadline if self._pending is None else min(deadline, frames_not_before)
                self._cond.wait(max(0.0, wake - now))
        return None

    def clear(self) -> None:
        """Forget every image and question (deactivate); `take` works again after."""
        with self._cond:
            self._pending, self._closed = None, False
            self._images.clear()
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
