"""QoS of the node's topics: fixed profiles that connect to the publishers drivers use.

A best-effort subscription connects to reliable and best-effort publishers alike, so the
cameras (`camera_qos: best_effort`, the default, keep last 1) and odometry (keep last 10)
take whatever driver there is; under the package's Fast DDS profile a best-effort
subscription gets every full-size frame from either kind of publisher (docs/ros.md, "DDS
setting"). `reliable` is there for a DDS setting of the vehicle's own that loses best-effort
frames of a reliable driver. Commands have two subscriptions: best effort and volatile (any
publisher), and reliable transient local (a latched command sent before the node started,
which only a transient-local subscription is sent); both set the same command. Questions are
reliable and volatile: each is answered once, never replayed to a new subscription.
"""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

BEST_EFFORT, RELIABLE = "best_effort", "reliable"
INPUT_QOS = (BEST_EFFORT, RELIABLE)         # the choices of camera_qos and odometry_qos
CAMERA_DEPTH, ODOMETRY_DEPTH = 1, 10         # a slow planner never has stale frames queued


def _profile(reliability: ReliabilityPolicy, depth: int,
             durability: DurabilityPolicy = DurabilityPolicy.VOLATILE) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=reliability,
                      durability=durability)


def input_qos(choice: str, depth: int) -> QoSProfile:
    """The subscription profile of a camera or odometry choice (`INPUT_QOS`)."""
    reliability = ReliabilityPolicy.RELIABLE if choice == RELIABLE else \
        ReliabilityPolicy.BEST_EFFORT
    return _profile(reliability, depth)


COMMAND_ANY_QOS = _profile(ReliabilityPolicy.BEST_EFFORT, 1)
COMMAND_LATCHED_QOS = _profile(ReliabilityPolicy.RELIABLE, 1, DurabilityPolicy.TRANSIENT_LOCAL)
QUESTION_QOS = _profile(ReliabilityPolicy.RELIABLE, 10)
OUTPUT_QOS = _profile(ReliabilityPolicy.RELIABLE, 10)


def describe(profile: QoSProfile) -> str:
    """A profile in words, for the node's log."""
    reliability = "reliable" if profile.reliability == ReliabilityPolicy.RELIABLE \
        else "best effort"
    durability = "transient local" if profile.durability == DurabilityPolicy.TRANSIENT_LOCAL \
        else "volatile"
    return f"{reliability}, {durability}, depth {profile.depth}"
