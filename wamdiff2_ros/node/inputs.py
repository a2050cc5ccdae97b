"""The node's receiving callbacks: convert, check, hand over; never plan, never raise.

Camera frames go to the one-frame slot of the `WorkQueue`, odometry to the
`OdometryTracker`, commands to the current command, questions to the question queue. Every
input is bounded before it is used (`limits.py`, the pixel limit of `images.py`); whatever
is refused is reported through `bad_input` (a counter, a throttled log line, /diagnostics)
and the next good message is used as usual.
"""
from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from sensor_msgs.msg import Image
from std_msgs.msg import String

from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.health import InputHealth
from wamdiff2_ros.node.images import compressed_to_rgb, image_to_rgb
from wamdiff2_ros.node.limits import check_command, check_not_future, check_question
from wamdiff2_ros.node.odometry import OdometryTracker, sample_from_msg
from wamdiff2_ros.node.params import NodeConfig
from wamdiff2_ros.node.worker import Frame, WorkQueue

CAMERA, ODOMETRY = "camera", "odometry"         # InputHealth names


def stamp_s(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def guarded(callback):
    """A receiving callback that reports an unexpected exception instead of raising it.

    The conversions raise BadInput for everything foreseen; this catches the rest (a bug, a
    message no one imagined), so no single message can stop the node.
    """
    @functools.wraps(callback)
    def wrapper(self, *args):
        try:
            return callback(self, *args)
        except Exception as exc:  # noqa: BLE001
            self._on_error(f"{callback.__name__}: {type(exc).__name__}: {exc}")
    return wrapper


@dataclass(frozen=True)
class NodeLinks:
    """What the callbacks need of the node, as callables read at each message."""

    config: Callable[[], NodeConfig]
    queue: Callable[[], WorkQueue]
    now_s: Callable[[], float]                        # the node clock (sim time aware)
    count_tokens: Callable[[], Callable[[str], int] | None]   # None until configured
    bad_input: Callable[[BadInput], None]             # count, log, report
    on_error: Callable[[str], None]                   # an unforeseen exception, counted
    answer_refused: Callable[[], None]                # publish the empty answer of a refusal
    count: Callable[[str], None]                      # a plain counter


class InputCallbacks:
    """The state the callbacks keep: the command and the non-trigger cameras' newest frames."""

    def __init__(self, links: NodeLinks, odometry: OdometryTracker, health: InputHealth):
        self._links, self._odometry, self._health = links, odometry, health
        self._lock = threading.Lock()
        self._other_images: dict[int, tuple[Any, float]] = {}
        self.command = links.config().default_command
        self._on_error = links.on_error

    def clear(self) -> None:
        """Forget the other cameras' frames (deactivate)."""
        with self._lock:
            self._other_images.clear()

    def _refuse(self, exc: BadInput) -> None:
        self._links.bad_input(exc)

    @guarded
    def image(self, camera: int, msg) -> None:
        """A frame of camera `camera` (0 triggers planning)."""
        links, cfg = self._links, self._links.config()
        links.count("frames_received")
        self._health.seen(f"{CAMERA}{camera}")
        stamp = stamp_s(msg.header.stamp)
        try:
            check_not_future(stamp, links.now_s(), cfg.max_future_s, "frame", "future_frames")
            rgb = image_to_rgb(msg, cfg.max_image_pixels) if isinstance(msg, Image) else \
                compressed_to_rgb(msg, cfg.max_image_pixels)
        except BadInput as exc:
            self._refuse(exc)
            return
        if camera > 0:
            with self._lock:
                self._other_images[camera] = (rgb, stamp)
            return
        images = [rgb]
        for other in range(1, len(cfg.cameras)):
            with self._lock:
                entry = self._other_images.get(other)
            if entry is None or (cfg.max_input_age_s > 0 and
                                 abs(entry[1] - stamp) > cfg.max_input_age_s):
                self._refuse(BadInput("camera_missing", f"no image from camera "
                                      f"{cfg.cameras[other]!r} within {cfg.max_input_age_s:g}"
                                      f" s of frame {stamp:.3f}"))
                return
            images.append(entry[0])
        replaced = links.queue().put_frame(Frame(tuple(images), msg.header, stamp,
                                                 time.monotonic()))
        if replaced is not None:
            links.count("dropped_frames")

    @guarded
    def odometry(self, msg) -> None:
        cfg = self._links.config()
        self._links.count("odometry_received")
        self._health.seen(ODOMETRY)
        resets = self._odometry.resets
        try:
            check_not_future(stamp_s(msg.header.stamp), self._links.now_s(), cfg.max_future_s,
                             "odometry", "odometry_future")
            self._odometry.update(sample_from_msg(msg, cfg.max_speed_mps), cfg.max_accel_mps2)
        except BadInput as exc:
            self._refuse(exc)
            return
        if self._odometry.resets != resets:
            self._refuse(BadInput("odometry_reset", f"odometry stamp "
                                  f"{stamp_s(msg.header.stamp):.3f} jumped back in time: "
                                  "history cleared, accepted as a new start"))

    @guarded
    def command_msg(self, msg: String) -> None:
        cfg = self._links.config()
        try:
            self.command = check_command(msg.data, cfg.max_command_chars, cfg.max_echo_chars)
        except BadInput as exc:
            self.command = cfg.default_command
            self._refuse(BadInput(exc.kind, f"{exc}; using {self.command!r}"))

    @guarded
    def question(self, msg: String) -> None:
        cfg, links = self._links.config(), self._links
        try:
            if "qa" not in cfg.tasks:
                raise BadInput("question_ignored", "the qa task is disabled (parameter tasks)")
            question = check_question(msg.data, cfg.max_question_chars,
                                      cfg.max_question_tokens, links.count_tokens())
        except BadInput as exc:
            links.count("questions_refused")
            self._refuse(exc)
            links.answer_refused()
            return
        if links.queue().put_question(question) is not None:
            links.count("questions_dropped")
