"""Replaying a bag into a running `planner_node` through DDS: the node answers the replayed
frames, matched by the image stamps it copies onto its outputs."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import rclpy
from bag_fixtures import WAMDIFF2
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.serialization import deserialize_message
from visualization_msgs.msg import MarkerArray

from wamdiff2_core.planner import bundled_checkpoint_path
from wamdiff2_ros.bag_io import BagReader, header_stamp_ns
from wamdiff2_ros.bag_layout import SIM_TOPICS, OutputTopics, node_input_remaps
from wamdiff2_ros.demo import SAMPLE_BAG
from wamdiff2_ros.demo_graph import NodeProcess, OutputRecorder, node_state

pytestmark = pytest.mark.ros
OUT = OutputTopics()
# The untrained preset, one 32-token block in 4 steps: a fraction of a second per frame.
FAST_TINY = {"checkpoint": "tiny", "decode.max_new_tokens": 32, "decode.steps_per_block": 4}


def _camera_stamps(bag_path) -> list[int]:
    with BagReader(bag_path) as bag:
        return [header_stamp_ns(raw) for *_, raw in bag.messages([SIM_TOPICS.image])]


def _status_stamps(recorder: OutputRecorder) -> set[int]:
    stamps = set()
    for item in recorder.messages(OUT.markers):
        for m in deserialize_message(item.raw, MarkerArray).markers:
            if m.ns == "wamdiff2/status":
                stamps.add(m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec)
    return stamps


def _replay_into_node(bag_path, domain: int, tmp_path, overrides: dict, rate: float,
                      timeout_s: float) -> OutputRecorder:
    """Start the node, wait until it is active, replay with the `wamdiff2 bag replay`
    command (remapped onto its inputs), and wait for an answer to every frame."""
    node = NodeProcess(domain, tmp_path / "node.log", {"max_input_age_s": 0.0, **overrides})
    context = Context()
    rclpy.init(args=[], context=context, domain_id=domain)
    client = rclpy.create_node("bag_replay_node_test", context=context)
    recorder = OutputRecorder(client, SingleThreadedExecutor(context=context))
    try:
        assert recorder.wait(lambda: not node.alive() or any(
            node_state(r.raw) == "active" for r in recorder.messages("/diagnostics")), 240)
        assert node.alive(), node.log_tail()
        remaps = [f"--remap={a}:={b}" for a, b in node_input_remaps().items()]
        proc = subprocess.run(
            [WAMDIFF2, "bag", "replay", str(bag_path), "--rate", str(rate), *remaps,
             "--topics", SIM_TOPICS.image, SIM_TOPICS.odometry, SIM_TOPICS.command,
             "--wait-for", SIM_TOPICS.image, SIM_TOPICS.odometry, SIM_TOPICS.command],
            env=dict(os.environ, ROS_DOMAIN_ID=str(domain)), capture_output=True, text=True,
            timeout=300)
        assert proc.returncode == 0, proc.stderr
        stamps = set(_camera_stamps(bag_path))
        recorder.wait(lambda: stamps <= _status_stamps(recorder), timeout_s)
        return recorder
    finally:
        recorder.close()
        client.destroy_node()
        rclpy.try_shutdown(context=context)
        assert node.stop() == 0, node.log_tail()


def test_replay_reaches_the_node_which_answers_every_replayed_frame(small_bag, ros_domain,
                                                                    tmp_path):
    recorder = _replay_into_node(small_bag, ros_domain, tmp_path, FAST_TINY, rate=0.5,
                                 timeout_s=60)
    stamps = _camera_stamps(small_bag)
    assert len(stamps) == 4
    assert set(stamps) <= _status_stamps(recorder)      # one answer per replayed frame


@pytest.mark.skipif(bundled_checkpoint_path() is None,
                    reason="no bundled default model yet (bundled_checkpoint_path() is None); "
                           "an untrained preset never produces a parseable path")
def test_replay_of_the_sample_bag_gives_paths_for_the_replayed_frames(ros_domain, tmp_path):
    recorder = _replay_into_node(SAMPLE_BAG, ros_domain, tmp_path, {}, rate=1.0,
                                 timeout_s=60)
    stamps = set(_camera_stamps(SAMPLE_BAG))
    paths = {header_stamp_ns(r.raw): r for r in recorder.messages(OUT.path)}
    assert set(paths) <= stamps                         # every path answers a replayed frame
    assert len(paths) >= len(stamps) // 2, f"{len(paths)} paths for {len(stamps)} frames"
    from nav_msgs.msg import Path
    for item in paths.values():
        path = deserialize_message(item.raw, Path)
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        assert xy.shape == (8, 2) and np.isfinite(xy).all()
        assert path.header.frame_id == "base_link"
