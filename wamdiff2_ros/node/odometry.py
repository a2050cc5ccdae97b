"""nav_msgs/Odometry -> the ego motion the planner prompt needs, and poses for odom paths.

Velocity comes from the message's twist, which nav_msgs/Odometry defines in the child
(body) frame: x forward, y left, the planner's ego frame. Acceleration is the difference of
successive velocities over the difference of their stamps. Non-finite or time-travelling
messages are rejected and leave the last good state untouched.
"""
from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from dataclasses import dataclass

from wamdiff2_ros.node.bad_input import BadInput


@dataclass(frozen=True)
class OdometrySample:
    """One accepted odometry message, in plain numbers."""

    stamp: float                          # seconds
    frame_id: str                         # the pose's frame (usually `odom`)
    position: tuple[float, float]         # metres in frame_id
    yaw: float                            # radians in frame_id
    velocity: tuple[float, float]         # m/s, body frame (x forward, y left)


@dataclass(frozen=True)
class EgoMotion:
    """What the planning prompt takes: body-frame velocity and acceleration."""

    velocity: tuple[float, float] = (0.0, 0.0)
    acceleration: tuple[float, float] = (0.0, 0.0)
    stamp: float | None = None            # stamp of the odometry it came from; None: none yet


def yaw_from_quaternion(x: float, y: float, z: float, w: float) -> float:
    """Rotation about z of a (not necessarily normalised) quaternion, radians in (-pi, pi]."""
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def sample_from_msg(msg) -> OdometrySample:
    """A nav_msgs/Odometry as an OdometrySample; BadInput if any number used is not finite."""
    pose, twist = msg.pose.pose, msg.twist.twist
    q = pose.orientation
    numbers = {"position.x": pose.position.x, "position.y": pose.position.y,
               "orientation.x": q.x, "orientation.y": q.y, "orientation.z": q.z,
               "orientation.w": q.w, "linear.x": twist.linear.x, "linear.y": twist.linear.y}
    bad = [name for name, value in numbers.items() if not math.isfinite(value)]
    if bad:
        raise BadInput("odometry_nonfinite", f"odometry has non-finite {', '.join(bad)}")
    if q.x == q.y == q.z == q.w == 0.0:
        raise BadInput("odometry_nonfinite", "odometry orientation is the zero quaternion")
    stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
    return OdometrySample(stamp=stamp, frame_id=msg.header.frame_id,
                          position=(pose.position.x, pose.position.y),
                          yaw=yaw_from_quaternion(q.x, q.y, q.z, q.w),
                          velocity=(twist.linear.x, twist.linear.y))


class OdometryTracker:
    """Thread-safe latest ego motion plus a short pose history.

    `max_accel_gap_s`: two messages further apart than this give no acceleration (the
    previous estimate is kept). `history` poses are kept for `pose_at`.
    """

    def __init__(self, max_accel_gap_s: float = 1.0, history: int = 400):
        self._lock = threading.Lock()
        self._max_gap = max_accel_gap_s
        self._samples: deque[OdometrySample] = deque(maxlen=history)
        self._motion = EgoMotion()

    def update(self, sample: OdometrySample) -> EgoMotion:
        """Accept a sample newer than the last one; BadInput if it is older (out of order)."""
        with self._lock:
            last = self._samples[-1] if self._samples else None
            if last is not None and sample.stamp < last.stamp:
                raise BadInput("odometry_out_of_order",
                               f"odometry stamp {sample.stamp:.3f} is older than the last "
                               f"one ({last.stamp:.3f})")
            accel = self._motion.acceleration
            if last is not None and 0.0 < sample.stamp - last.stamp <= self._max_gap:
                dt = sample.stamp - last.stamp
                accel = ((sample.velocity[0] - last.velocity[0]) / dt,
                         (sample.velocity[1] - last.velocity[1]) / dt)
            self._samples.append(sample)
            self._motion = EgoMotion(sample.velocity, accel, sample.stamp)
            return self._motion

    def motion(self) -> EgoMotion:
        """The latest ego motion (zeros and stamp None before the first message)."""
        with self._lock:
            return self._motion

    def pose_at(self, stamp: float, tolerance_s: float) -> tuple[str, float, float, float]:
        """(frame_id, x, y, yaw) at `stamp`, interpolated between the samples around it.

        Outside the history, the nearest sample is used if it is within `tolerance_s`;
        otherwise BadInput (kind ``odometry_missing``).
        """
        with self._lock:
            samples = list(self._samples)
        if not samples:
            raise BadInput("odometry_missing", "no odometry received yet")
        stamps = [s.stamp for s in samples]
        i = bisect.bisect_left(stamps, stamp)
        if 0 < i < len(samples):
            a, b = samples[i - 1], samples[i]
            f = (stamp - a.stamp) / (b.stamp - a.stamp) if b.stamp > a.stamp else 0.0
            dyaw = math.atan2(math.sin(b.yaw - a.yaw), math.cos(b.yaw - a.yaw))
            return (b.frame_id, a.position[0] + f * (b.position[0] - a.position[0]),
                    a.position[1] + f * (b.position[1] - a.position[1]), a.yaw + f * dyaw)
        nearest = samples[0] if i == 0 else samples[-1]
        if abs(nearest.stamp - stamp) > tolerance_s:
            raise BadInput("odometry_missing",
                           f"no odometry within {tolerance_s:.2f} s of the image stamp "
                           f"{stamp:.3f} (nearest {nearest.stamp:.3f})")
        return (nearest.frame_id, nearest.position[0], nearest.position[1], nearest.yaw)
