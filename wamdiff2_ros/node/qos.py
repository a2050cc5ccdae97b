"""QoS of the node's topics: profiles that connect to the publishers drivers use.

Cameras (keep last 1) follow `camera_qos`. `auto` (the default) adapts to the camera's
publishers, as rosbag2 does: reliable where every publisher of the topic offers reliable
and the node runs under a DDS setting that is not the package's profile (there, Fast DDS's
defaults and LARGE_DATA alike, a best-effort reader loses most full-size frames of a
reliable driver while a reliable depth-1 reader gets them all); best effort otherwise (it
connects to any publisher, and under the package's profile gets every full-size frame of
either kind). `best_effort` and `reliable` fix the choice (docs/ros.md, "QoS"). Odometry
(keep last 10) is best effort or reliable. Commands have two subscriptions: best effort and
volatile (any publisher), and reliable transient local (a latched command sent before the
node started, which only a transient-local subscription is sent); both set the same
command. Questions are reliable and volatile: each is answered once, never replayed to a
new subscription.
"""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

AUTO, BEST_EFFORT, RELIABLE = "auto", "best_effort", "reliable"
INPUT_QOS = (BEST_EFFORT, RELIABLE)         # the choices of odometry_qos
CAMERA_QOS = (AUTO, BEST_EFFORT, RELIABLE)  # the choices of camera_qos
CAMERA_DEPTH, ODOMETRY_DEPTH = 1, 10         # a slow planner never has stale frames queued


def _profile(reliability: ReliabilityPolicy, depth: int,
             durability: DurabilityPolicy = DurabilityPolicy.VOLATILE) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=reliability,
                      durability=durability)


def input_qos(choice: str, depth: int) -> QoSProfile:
    """The subscription profile of a camera or odometry choice (`INPUT_QOS`; a camera's
    `auto` resolved by `camera_choice` first)."""
    reliability = ReliabilityPolicy.RELIABLE if choice == RELIABLE else \
        ReliabilityPolicy.BEST_EFFORT
    return _profile(reliability, depth)


def camera_choice(choice: str, publishers: list[QoSProfile], package_profile: bool
                  ) -> tuple[str, str]:
    """(best_effort | reliable, why) for a camera topic under `camera_qos` `choice`, given
    the QoS its `publishers` offer and whether the node runs under the package's profile."""
    if choice != AUTO:
        return choice, "camera_qos"
    if package_profile:
        return BEST_EFFORT, "auto: the package's DDS profile delivers full frames best effort"
    if not publishers:
        return BEST_EFFORT, "auto: no publisher yet (best effort connects to any)"
    if all(p.reliability == ReliabilityPolicy.RELIABLE for p in publishers):
        return RELIABLE, f"auto: every publisher ({len(publishers)}) offers reliable"
    return BEST_EFFORT, "auto: a publisher is best effort"


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
