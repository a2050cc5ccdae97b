"""What waits for the model: the jobs, and the inbox the receiving callbacks fill.

Receiving callbacks only convert and `put`; the scheduler (`scheduler.py`) takes jobs. The
inbox keeps each camera's last few images; a trigger-camera image that arrives while another
waits replaces it (counted as dropped), so nothing queues and every plan starts from the
newest frame there is. A trigger image waits for the other cameras (`Inbox.ready_frame`):
it becomes a frame job as soon as every other camera has an image within
`camera_sync_tolerance_s` of its stamp, or one stamped past that (none nearer will come), or
when `camera_sync_wait_s` after its arrival has passed; the images are then gathered to its
stamp (`gather`: each camera's image nearest that stamp; a camera without one is a named gap,
`camera_late` or `camera_missing`). Arrival order does not matter, only stamps do.
Questions wait in a short queue of their own, each with its arrival time, and are answered
on the latest frame. Every job carries the settings in force when it arrived (`Settings`).
"""
from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    received: float = 0.0             # time.monotonic() when the question arrived


@dataclass(frozen=True)
class Question:
    """A question waiting for the model."""

    text: str
    settings: Settings
    received: float                   # time.monotonic() on arrival

    @property
    def deadline(self) -> float:
        """When it is refused if not begun (`question_timeout_s` after arrival)."""
        return self.received + self.settings.config.question_timeout_s


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


def synced(trigger: CameraImage, others: dict[int, Sequence[CameraImage]],
           config: NodeConfig) -> bool:
    """Whether waiting longer cannot improve `trigger`'s frame: every other camera has an
    image within `camera_sync_tolerance_s` of its stamp, or one stamped later than that."""
    tolerance = config.camera_sync_tolerance_s
    for index in range(1, len(config.cameras)):
        if not any(im.stamp >= trigger.stamp - tolerance for im in others.get(index, ())):
            return False
    return True


class Inbox:
    """The newest unplanned trigger image, each camera's last `HISTORY` images, pending
    questions, and the trigger camera's arrival times (its period).

    Thread-safe; the scheduler waits on `cond` and reads with it held."""

    def __init__(self, max_questions: int = 8):
        self.cond = threading.Condition()
        self._pending: tuple[CameraImage, Settings] | None = None
        self._images: dict[int, deque[CameraImage]] = {}  # camera -> its last images
        self._arrivals: deque[float] = deque(maxlen=9)    # trigger arrivals (monotonic)
        self.questions: deque[Question] = deque(maxlen=max_questions)
        self.closed = False

    def put_image(self, camera: int, image: CameraImage, settings: Settings) -> bool:
        """Offer camera `camera`'s image (0 triggers planning); True when it replaced an
        unplanned trigger image (now dropped)."""
        with self.cond:
            self._images.setdefault(camera, deque(maxlen=HISTORY)).append(image)
            replaced = False
            if camera == 0:
                replaced = self._pending is not None
                self._pending = (image, settings)
                self._arrivals.append(image.received)
            self.cond.notify_all()
        return replaced

    def put_question(self, question: str, settings: Settings) -> Question | None:
        """Queue a question; returns the oldest one if the queue was full (now dropped)."""
        with self.cond:
            full = len(self.questions) == self.questions.maxlen
            dropped = self.questions[0] if full else None
            self.questions.append(Question(question, settings, time.monotonic()))
            self.cond.notify_all()
        return dropped

    # ---------------------------------------------------- read with `cond` held
    def frame_pending(self) -> bool:
        """A trigger image waits (for the model, or for the other cameras)."""
        return self._pending is not None

    def ready_frame(self, now: float, take: bool = True, force: bool = False
                    ) -> FrameJob | None:
        """The pending frame once its cameras are in sync or its wait is over (`force`:
        now, as it is), taken unless `take` is False."""
        if self._pending is None:
            return None
        trigger, settings = self._pending
        others = self._others()
        if not force and not synced(trigger, others, settings.config) and \
                now < trigger.received + settings.config.camera_sync_wait_s:
            return None
        if take:
            self._pending = None
        frame, gaps = gather(trigger, others, settings.config)
        return FrameJob(frame, gaps, settings)

    def pending_deadline(self) -> float | None:
        """When the pending frame's `plan_timeout_s` from its arrival ends (None: no frame
        or no timeout)."""
        if self._pending is None:
            return None
        trigger, settings = self._pending
        timeout = settings.config.plan_timeout_s
        return trigger.received + timeout if timeout > 0 else None

    def latest_frame(self, settings: Settings) -> FrameJob | None:
        """The newest trigger image's frame, planned before or not (the watchdog's)."""
        latest = self.latest()
        if latest is None:
            return None
        frame, gaps = gather(latest, self._others(), settings.config)
        return FrameJob(frame, gaps, settings)

    def sync_ends(self) -> float | None:
        """When the pending frame stops waiting for the other cameras (None: none)."""
        if self._pending is None:
            return None
        trigger, settings = self._pending
        return trigger.received + settings.config.camera_sync_wait_s

    def latest(self) -> CameraImage | None:
        """The newest trigger image (planned or not)."""
        images = self._images.get(0)
        return images[-1] if images else None

    def question_job(self, question: Question) -> QuestionJob:
        """`question` on the newest frame (there must be one: `latest`)."""
        frame, gaps = gather(self.latest(), self._others(), question.settings.config)
        return QuestionJob(question.text, frame, gaps, question.settings, question.received)

    def period_s(self) -> float | None:
        """The trigger camera's period: the median of its last arrival intervals."""
        times = list(self._arrivals)
        if len(times) < 3:
            return None
        return statistics.median(b - a for a, b in zip(times, times[1:]))

    def last_arrival(self) -> float | None:
        return self._arrivals[-1] if self._arrivals else None

    def _others(self) -> dict[int, tuple[CameraImage, ...]]:
        return {k: tuple(v) for k, v in self._images.items() if k != 0}

    # ---------------------------------------------------- lifecycle
    def clear(self) -> None:
        """Forget every image and question (deactivate); the inbox works again after."""
        with self.cond:
            self._pending, self.closed = None, False
            self._images.clear()
            self._arrivals.clear()
            self.questions.clear()

    def close(self) -> None:
        """Wake every waiter: the scheduler's lane ends."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
