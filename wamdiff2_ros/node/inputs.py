"""What the node's receiving callbacks do with a message: convert and check it, never plan.

Each function returns the converted input or raises `BadInput` (its kind is the diagnostics
counter); every input is bounded before it is used (`limits.py`, the pixel limit of
`images.py`). `guarded` wraps a callback so that an exception nobody foresaw is counted
instead of stopping the node.
"""
from __future__ import annotations

import functools
import time

from sensor_msgs.msg import Image

from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.images import compressed_to_rgb, image_to_rgb
from wamdiff2_ros.node.limits import check_not_future
from wamdiff2_ros.node.odometry import OdometrySample, OdometryTracker, sample_from_msg
from wamdiff2_ros.node.params import NodeConfig
from wamdiff2_ros.node.worker import CameraImage

CAMERA, ODOMETRY = "camera", "odometry"         # InputHealth names


def stamp_s(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def guarded(callback):
    """A receiving callback (a method of a node with `_callback_error(text)`) that reports
    an unexpected exception instead of raising it: the conversions raise BadInput for
    everything foreseen, this catches the rest, so no single message can stop the node."""
    @functools.wraps(callback)
    def wrapper(self, *args):
        try:
            return callback(self, *args)
        except Exception as exc:  # noqa: BLE001
            self._callback_error(f"{callback.__name__}: {type(exc).__name__}: {exc}")
    return wrapper


def camera_image(msg, config: NodeConfig, now_s: float) -> CameraImage:
    """A camera message (Image or CompressedImage) as a checked RGB image."""
    stamp = stamp_s(msg.header.stamp)
    check_not_future(stamp, now_s, config.max_future_s, "frame", "future_frames")
    rgb = image_to_rgb(msg, config.max_image_pixels) if isinstance(msg, Image) else \
        compressed_to_rgb(msg, config.max_image_pixels)
    return CameraImage(rgb, msg.header, stamp, time.monotonic())


def accept_odometry(msg, config: NodeConfig, now_s: float, tracker: OdometryTracker
                    ) -> OdometrySample:
    """Check an Odometry message and add it to `tracker`; BadInput ``odometry_reset`` (after
    it was accepted) when its stamp jumped back in time and the history started afresh."""
    check_not_future(stamp_s(msg.header.stamp), now_s, config.max_future_s, "odometry",
                     "odometry_future")
    sample = sample_from_msg(msg, config.max_speed_mps)
    resets = tracker.resets
    tracker.update(sample, config.max_accel_mps2)
    if tracker.resets != resets:
        raise BadInput("odometry_reset", f"odometry stamp {sample.stamp:.3f} jumped back in "
                                         "time: history cleared, accepted as a new start")
    return sample
