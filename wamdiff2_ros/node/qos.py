"""QoS of the node's topics, and input subscriptions whose QoS follows the publishers.

A reliable subscription never connects to a best-effort publisher, and a transient-local
one never to a volatile publisher; many camera drivers publish best effort, most tools
reliable. With the choice ``auto`` (the default of `camera_qos` and `odometry_qos`, and how
commands and questions are always subscribed) the node reads the publishers' QoS on the
topic (`get_publishers_info_by_topic`, as rosbag2 does when it records) and requests what
every one of them offers: reliable when all are reliable, else best effort; transient local
when all are and the topic holds state (the command: a latched command sent before the node
started still arrives), else volatile. With no publisher yet it subscribes best effort and
volatile, which matches any publisher. `refresh()`, called every second, re-reads the
publishers and re-subscribes only when the best match changed. Explicit choices
(``reliable``: keep last 1 for cameras; ``sensor_data``: best effort, keep last 5) are kept
as they are, and an incompatible publisher is reported.

Best-effort frames of 640x360 and more need a DDS that can take them: see
config/fastdds_node.xml and docs/ros.md (Fast DDS defaults lose most of them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)

AUTO = "auto"


@dataclass(frozen=True)
class TopicQos:
    """How one input topic is subscribed: the parameter's choice and the topic's needs."""

    choice: str                       # auto | reliable | sensor_data
    depth: int                        # keep-last depth of the reliable and auto profiles
    keep_state: bool = False          # transient local when every publisher offers it


def camera_qos(choice: str) -> TopicQos:
    """Depth 1: a slow planner never has stale frames queued for it."""
    return TopicQos(choice, 1)


def odometry_qos(choice: str) -> TopicQos:
    return TopicQos(choice, 10)


COMMAND_QOS = TopicQos(AUTO, 5, keep_state=True)     # a state: the latest command counts
QUESTION_QOS = TopicQos(AUTO, 10)                    # events: each question once


def explicit_profile(choice: str, depth: int) -> QoSProfile:
    """The profile of an explicit choice: reliable (keep last `depth`) or sensor_data."""
    if choice == "sensor_data":
        return qos_profile_sensor_data
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def match_publishers(offered: list[QoSProfile], depth: int, keep_state: bool) -> QoSProfile:
    """The profile that connects to every publisher in `offered` and asks the most of them:
    reliable only if all are reliable, transient local only if all are and `keep_state`."""
    reliable = bool(offered) and all(
        q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
    transient = keep_state and bool(offered) and all(
        q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=(ReliabilityPolicy.RELIABLE if reliable
                                   else ReliabilityPolicy.BEST_EFFORT),
                      durability=(DurabilityPolicy.TRANSIENT_LOCAL if transient
                                  else DurabilityPolicy.VOLATILE))


def describe(profile: QoSProfile) -> str:
    reliability = "reliable" if profile.reliability == ReliabilityPolicy.RELIABLE \
        else "best effort"
    durability = "transient local" if profile.durability == DurabilityPolicy.TRANSIENT_LOCAL \
        else "volatile"
    return f"{reliability}, {durability}, depth {profile.depth}"


def _key(profile: QoSProfile) -> tuple:
    return (profile.reliability, profile.durability, profile.history, profile.depth)


class AdaptiveSubscription:
    """One input subscription on `node`, re-created when the publishers call for it.

    `on_incompatible(topic, text)` hears of a publisher this subscription cannot connect to;
    `on_lost(topic, count)` of messages DDS reports lost; `on_change(topic, text)` of each
    (re)subscription.
    """

    def __init__(self, node, msg_type: type, topic: str, callback: Callable[[Any], None],
                 qos: TopicQos, callback_group, on_change: Callable[[str, str], None],
                 on_incompatible: Callable[[str, str], None],
                 on_lost: Callable[[str, int], None]):
        self._node, self._msg_type, self._topic, self._callback = node, msg_type, topic, \
            callback
        self._qos, self._group = qos, callback_group
        self._on_change, self._on_incompatible, self._on_lost = on_change, on_incompatible, \
            on_lost
        self.resolved = node.resolve_topic_name(topic)
        self.subscription = None
        self.profile: QoSProfile | None = None
        self.refresh()

    @property
    def topic_name(self) -> str:
        return self.resolved

    def publishers(self) -> int:
        return len(self._node.get_publishers_info_by_topic(self.resolved))

    def wanted(self) -> QoSProfile:
        """The profile this subscription should have now."""
        if self._qos.choice != AUTO:
            return explicit_profile(self._qos.choice, self._qos.depth)
        offered = [info.qos_profile for info in
                   self._node.get_publishers_info_by_topic(self.resolved)]
        return match_publishers(offered, self._qos.depth, self._qos.keep_state)

    def refresh(self) -> bool:
        """Re-subscribe if the wanted profile changed; True if it did."""
        profile = self.wanted()
        if self.profile is not None and _key(profile) == _key(self.profile):
            return False
        if self.subscription is not None:
            self._node.destroy_subscription(self.subscription)
        events = SubscriptionEventCallbacks(
            incompatible_qos=lambda status: self._on_incompatible(
                self.resolved, f"a publisher's QoS is incompatible with this subscription "
                               f"({describe(profile)}; {status.total_count} in all)"),
            message_lost=lambda status: self._on_lost(self.resolved,
                                                      int(status.total_count_change)))
        self.subscription = self._node.create_subscription(
            self._msg_type, self._topic, self._callback, profile,
            callback_group=self._group, event_callbacks=events)
        self.profile = profile
        self._on_change(self.resolved, describe(profile))
        return True

    def destroy(self) -> None:
        if self.subscription is not None:
            self._node.destroy_subscription(self.subscription)
        self.subscription = None


# Outputs: reliable, keep last 10, volatile.
OUTPUT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                        reliability=ReliabilityPolicy.RELIABLE)
