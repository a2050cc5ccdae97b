"""Input QoS over real DDS (issues 15, 46): with its fixed profiles the node connects to a
best-effort camera driver and to a reliable one alike and gets their full-size frames under
the shipped Fast DDS profile (the harness gives it to the node, as the launch file does); a
latched command sent before the node started arrives; an explicit choice that cannot
connect is reported."""
from __future__ import annotations

import time

import pytest
from lifecycle_msgs.msg import Transition
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)
from sensor_msgs.msg import Image
from std_msgs.msg import String

from ros_harness import FAST_TINY, NODE, NodeProcess, RosClient, rgb_image_msg
from sim_frames import sim_frames

pytestmark = pytest.mark.ros
IMAGE, COMMAND = f"{NODE}/input/image", f"{NODE}/input/command"


def _subscription_qos(client: RosClient, topic: str) -> QoSProfile | None:
    infos = client.node.get_subscriptions_info_by_topic(topic)
    return infos[0].qos_profile if infos else None


def _status_text(markers) -> str:
    return next(m.text for m in markers.markers if m.ns == "wamdiff2/status")


def _answered(client: RosClient, rgb, tries: int) -> int:
    """Frames of `tries` sent one at a time that got the node's answer (best effort may
    lose one; each is waited for before the next)."""
    got = 0
    for _ in range(tries):
        stamp = client.publish_frame(rgb)
        try:
            client.wait_answered(stamp, timeout=30)
            got += 1
        except AssertionError:
            pass
    return got


def test_best_effort_and_reliable_drivers_both_deliver_full_frames(ros_domain, tmp_path):
    client = RosClient(ros_domain, camera_qos=qos_profile_sensor_data)   # a driver's QoS
    client.node.destroy_publisher(client.command_pub)        # the latched one is the only one
    latched = client.node.create_publisher(String, COMMAND, QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    latched.publish(String(data="left"))                     # before the node exists
    node = NodeProcess(ros_domain, tmp_path, FAST_TINY)
    try:
        client.wait_ready(node)
        client.wait_matched(client.image_pub)
        camera = _subscription_qos(client, IMAGE)
        assert camera.reliability == ReliabilityPolicy.BEST_EFFORT   # (depth is not shown)

        counts = {}
        for driver in ("best_effort", "reliable"):
            if driver == "reliable":                         # the best-effort driver goes
                client.node.destroy_publisher(client.image_pub)
                client.image_pub = client.node.create_publisher(Image, IMAGE, QoSProfile(
                    history=HistoryPolicy.KEEP_LAST, depth=1,
                    reliability=ReliabilityPolicy.RELIABLE))
                client.wait_matched(client.image_pub)
            for width, height in ((640, 360), (1280, 720)):
                counts[f"{driver} {width}x{height}"] = _answered(
                    client, sim_frames(1, width, height)[0].rgb, 5)
        print(f"frames answered (of 5): {counts}")
        assert all(n >= 4 for n in counts.values()), counts
        # The command latched before the node started was received.
        last = client.messages("markers")[-1][1]
        assert _status_text(last).startswith("left:"), _status_text(last)
        assert client.counter("qos_incompatible") == 0       # a volatile command is normal

        # An explicit choice is kept, and a publisher it cannot connect to is reported.
        assert client.lifecycle(Transition.TRANSITION_DEACTIVATE)
        assert client.lifecycle(Transition.TRANSITION_CLEANUP)
        assert client.set_parameters({"camera_qos": "reliable"})[0].successful
        assert client.lifecycle(Transition.TRANSITION_CONFIGURE)
        assert client.lifecycle(Transition.TRANSITION_ACTIVATE)
        best_effort = client.node.create_publisher(Image, IMAGE, qos_profile_sensor_data)
        client.wait_for(lambda: client.counter("qos_incompatible") > 0, 60,
                        "a qos_incompatible diagnostic")
        best_effort.publish(rgb_image_msg(sim_frames(1, 640, 360)[0].rgb, client.now()))
        time.sleep(1.0)
        assert _subscription_qos(client, IMAGE).reliability == ReliabilityPolicy.RELIABLE
        assert node.alive(), node.output()
    finally:
        client.close()
        node.stop()
