"""nav_msgs/Odometry -> the ego motion the planner prompt needs, and poses for odom paths.

Velocity comes from the message's twist, which nav_msgs/Odometry defines in the child
(body) frame: x forward, y left, the planner's ego frame. Acceleration is the difference of
successive velocities over the difference of their stamps, the earlier velocity turned into
the later body frame first (by the yaw change between the two poses), so that it is the
acceleration in the ground frame expressed in the body frame, centripetal part included, as
the training data's (`World.ego_motion`). Non-finite, implausible (too fast, too large an
acceleration) or slightly out-of-order messages are rejected and leave the last good state
untouched; a stamp more than `RESET_JUMP_S` older than the last one means time started again
(a bag loop, a simulator reset) and starts a fresh history. A frame reads the motion at its
own stamp (`motion_at`: interpolated between the samples around it), not the newest sample:
the frame is the timing anchor of its plan.
"""
from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from dataclasses import dataclass

from wamdiff2_core.tasks.motion import ImplausibleMotion, check_accel, check_speed
from wamdiff2_ros.node.bad_input import BadInput

#: An odometry stamp this much older than the last one is a restart of time, not disorder.
RESET_JUMP_S = 1.0
#: Successive stamps closer than this give no acceleration estimate (the previous one stays).
MIN_ACCEL_DT_S = 1e-3
#: A quaternion shorter than this has no direction to read a yaw from (an unset pose).
MIN_QUATERNION_NORM = 1e-3


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


def sample_from_msg(msg, max_speed_mps: float = math.inf) -> OdometrySample:
    """A nav_msgs/Odometry as an OdometrySample; BadInput if any number used is not finite
    (``odometry_nonfinite``), the orientation is no rotation (``odometry_orientation``: the
    zero quaternion) or the speed exceeds `max_speed_mps` (``odometry_implausible``)."""
    pose, twist = msg.pose.pose, msg.twist.twist
    q = pose.orientation
    numbers = {"position.x": pose.position.x, "position.y": pose.position.y,
               "orientation.x": q.x, "orientation.y": q.y, "orientation.z": q.z,
               "orientation.w": q.w, "linear.x": twist.linear.x, "linear.y": twist.linear.y}
    bad = [name for name, value in numbers.items() if not math.isfinite(value)]
    if bad:
        raise BadInput("odometry_nonfinite", f"odometry has non-finite {', '.join(bad)}")
    norm = math.sqrt(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w)
    if norm < MIN_QUATERNION_NORM:
        raise BadInput("odometry_orientation", f"odometry orientation ({q.x:g}, {q.y:g}, "
                                               f"{q.z:g}, {q.w:g}) is no rotation (norm "
                                               f"{norm:.3g}; the zero quaternion of an unset "
                                               "pose?)")
    try:
        check_speed((twist.linear.x, twist.linear.y), max_speed_mps, "odometry speed")
    except ImplausibleMotion as exc:
        raise BadInput("odometry_implausible", str(exc)) from None
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
        self._motions: deque[EgoMotion] = deque(maxlen=history)    # one per sample
        self._motion = EgoMotion()
        self.resets = 0                       # histories dropped for a backwards jump of time

    def reset(self) -> None:
        """Forget every sample (cleanup, a jump of time): the next one starts afresh."""
        with self._lock:
            self._samples.clear()
            self._motions.clear()
            self._motion = EgoMotion()

    def update(self, sample: OdometrySample, max_accel_mps2: float = math.inf) -> EgoMotion:
        """Accept a sample; the new motion.

        A stamp older than the last one by at most RESET_JUMP_S is out of order (BadInput
        ``odometry_out_of_order``); older by more, time restarted: the history is dropped,
        this sample starts a new one and `resets` counts it. An acceleration above
        `max_accel_mps2` is implausible (BadInput ``odometry_implausible``); a rejected
        sample leaves the state as it was.
        """
        with self._lock:
            last = self._samples[-1] if self._samples else None
            if last is not None and sample.stamp < last.stamp - RESET_JUMP_S:
                self._samples.clear()
                self._motions.clear()
                self._motion, last = EgoMotion(), None
                self.resets += 1
            if last is not None and sample.stamp < last.stamp:
                raise BadInput("odometry_out_of_order",
                               f"odometry stamp {sample.stamp:.3f} is older than the last "
                               f"one ({last.stamp:.3f})")
            accel = self._motion.acceleration
            if last is not None and MIN_ACCEL_DT_S <= sample.stamp - last.stamp <= \
                    self._max_gap:
                dt = sample.stamp - last.stamp
                turn = last.yaw - sample.yaw          # the earlier body frame, seen from now
                c, s = math.cos(turn), math.sin(turn)
                vx, vy = last.velocity
                accel = ((sample.velocity[0] - (c * vx - s * vy)) / dt,
                         (sample.velocity[1] - (s * vx + c * vy)) / dt)
                try:
                    check_accel(accel, max_accel_mps2, f"odometry acceleration (over "
                                                       f"{dt:.3f} s)")
                except ImplausibleMotion as exc:
                    raise BadInput("odometry_implausible", str(exc)) from None
            self._samples.append(sample)
            self._motion = EgoMotion(sample.velocity, accel, sample.stamp)
            self._motions.append(self._motion)
            return self._motion

    def motion(self) -> EgoMotion:
        """The latest ego motion (zeros and stamp None before the first message)."""
        with self._lock:
            return self._motion

    def motion_at(self, stamp: float) -> EgoMotion:
        """The ego motion at `stamp` (a frame's): between two samples, the velocity
        interpolated and the acceleration estimated over that interval, stamped `stamp`;
        after the newest sample, the newest motion with its own stamp (so that its age
        shows: `max_odometry_age_s`); before the oldest, the oldest. Zeros and stamp None
        before the first message."""
        with self._lock:
            samples, motions = list(self._samples), list(self._motions)
        if not samples:
            return EgoMotion()
        i = bisect.bisect_left([s.stamp for s in samples], stamp)
        if i >= len(samples):
            return motions[-1]
        if i == 0:
            return motions[0]
        a, b = samples[i - 1], samples[i]
        f = (stamp - a.stamp) / (b.stamp - a.stamp) if b.stamp > a.stamp else 1.0
        velocity = (a.velocity[0] + f * (b.velocity[0] - a.velocity[0]),
                    a.velocity[1] + f * (b.velocity[1] - a.velocity[1]))
        return EgoMotion(velocity, motions[i].acceleration, stamp)

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
