"""`camera_qos: auto` (issue 55): in a LARGE_DATA graph a reliable 640x360 camera driver gets
every frame planned by the model with the shipped parameters (a best-effort reader lost most
of them there), a best-effort driver that replaces it and a reliable one started after the
node are followed; the choice itself, per DDS setting and publisher set."""
from __future__ import annotations

import threading
import time

import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image

from ros_harness import DDS_PROFILE, NODE, NodeProcess, RosClient
from sim_frames import sim_frames

from wamdiff2_core.planner import bundled_checkpoint_path
from wamdiff2_ros.node import dds, qos

IMAGE = f"{NODE}/input/image"
LARGE_DATA = {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"}
RELIABLE = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)


def test_auto_follows_the_publishers_only_off_the_package_profile():
    best_effort = qos_profile_sensor_data
    assert qos.camera_choice("auto", [RELIABLE, RELIABLE], False)[0] == qos.RELIABLE
    assert qos.camera_choice("auto", [RELIABLE, best_effort], False)[0] == qos.BEST_EFFORT
    assert qos.camera_choice("auto", [], False)[0] == qos.BEST_EFFORT
    assert qos.camera_choice("auto", [RELIABLE], True)[0] == qos.BEST_EFFORT
    for choice in (qos.BEST_EFFORT, qos.RELIABLE):        # explicit choices are kept
        assert qos.camera_choice(choice, [best_effort], False)[0] == choice
        assert qos.camera_choice(choice, [RELIABLE], True)[0] == choice
    assert dds.package_profile({dds.PROFILE_VARIABLE: str(DDS_PROFILE)})
    for other in ({}, LARGE_DATA, {dds.PROFILE_VARIABLE: "/etc/mine.xml"},
                  {dds.PROFILE_VARIABLE: str(DDS_PROFILE), **LARGE_DATA},
                  {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}):
        assert not dds.package_profile(other), other


def _camera_reliability(client: RosClient):
    infos = client.node.get_subscriptions_info_by_topic(IMAGE)
    return infos[0].qos_profile.reliability if len(infos) == 1 else None


def _odometry_stream(client: RosClient, stop: threading.Event) -> threading.Thread:
    """Odometry at 20 Hz, as a vehicle sends it (the shipped parameters require it)."""
    def run():
        while not stop.wait(0.05):
            client.publish_odometry(client.now(), vx=5.0)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _sources(client: RosClient, frames, wait_s: float) -> list[str | None]:
    """Each frame published once, in turn (the next after the previous one's Path or
    `wait_s`): the source of its Path, None where none came (the frame was lost)."""
    out = []
    for rgb in frames:
        stamp = client.publish_frame(rgb)
        try:
            out.append(client.wait_status(stamp, timeout=wait_s)["source"])
        except AssertionError:
            out.append(None)
    return out


@pytest.mark.ros
@pytest.mark.skipif(bundled_checkpoint_path() is None, reason="needs the bundled model")
def test_a_large_data_graph_gets_every_reliable_frame_planned(ros_domain, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("FASTDDS_BUILTIN_TRANSPORTS", "LARGE_DATA")  # this process's peers too
    client = RosClient(ros_domain)                       # a reliable driver, keep last 1
    node = NodeProcess(ros_domain, tmp_path)             # the params file, nothing changed
    stop = threading.Event()
    try:
        client.wait_ready(node)
        client.wait_matched(client.image_pub)
        assert "(FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA)" in node.output()
        assert _camera_reliability(client) == ReliabilityPolicy.RELIABLE, node.output()
        _odometry_stream(client, stop)
        frames = [f.rgb for f in sim_frames(20, 640, 360)]
        time.sleep(1.0)        # odometry on both sides of the first frame's stamp
        sources = _sources(client, frames, 30.0)
        assert sources == ["model"] * len(frames), sources
        assert client.counter("messages_lost") == 0

        # A best-effort driver replaces it: the node follows (a reliable subscription could
        # not connect to it) and plans its frames. 320x180: in this graph best effort loses
        # most full-size frames whatever the reader does (seen: 3 of 16 at 2 Hz), small ones
        # arrive.
        client.node.destroy_publisher(client.image_pub)
        client.image_pub = client.node.create_publisher(Image, IMAGE, qos_profile_sensor_data)
        client.wait_for(lambda: _camera_reliability(client) == ReliabilityPolicy.BEST_EFFORT,
                        30, "the camera subscription to turn best effort")
        client.wait_matched(client.image_pub)
        sources = _sources(client, [f.rgb for f in sim_frames(6, 320, 180)], 15.0)
        assert sources.count("model") >= 5 and set(sources) <= {"model", None}, \
            (sources, node.output()[-3000:])
        # The driver goes; a reliable one starts later (the node came up first): the node
        # turns reliable again and gets its full-size frames.
        client.node.destroy_publisher(client.image_pub)
        time.sleep(2.0)
        client.image_pub = client.node.create_publisher(Image, IMAGE, RELIABLE)
        client.wait_for(lambda: _camera_reliability(client) == ReliabilityPolicy.RELIABLE,
                        30, "the camera subscription to turn reliable again")
        client.wait_matched(client.image_pub)
        sources = _sources(client, frames[:5], 30.0)
        assert sources == ["model"] * 5, (sources, node.output()[-3000:])
        assert client.counter("qos_incompatible") == 0     # a moment's mismatch under auto
        assert "auto: a publisher is best effort" in node.output()
        assert node.alive(), node.output()
    finally:
        stop.set()
        client.close()
        node.stop()
