"""`bag record-sim`: what is written reads back with the same values, for every topic.

Read back with rosbags' own deserializer (not the rclpy one that wrote the CDR), compared
field by field with the rclpy messages the recorder built, and checked against the
simulator's data directly (pixels, expert future, boxes, ego velocity).
"""
from __future__ import annotations

import array
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from bag_fixtures import SMALL, WAMDIFF2
from rosbags.highlevel import AnyReader

from wamdiff2_core.sim.episode import run_episode
from wamdiff2_core.sim.generator import episode_seed
from wamdiff2_ros.tools.bag_io import BagReader, jazzy_typestore
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS, parse_ground_truth
from wamdiff2_ros.tools.bag_record import RecordConfig, record_sim, sim_messages


def values_equal(expected, got, where: str = "msg") -> None:
    """Assert an rclpy message (or value) equals a rosbags one, recursively, by value."""
    if hasattr(expected, "get_fields_and_field_types"):
        for name in expected.get_fields_and_field_types():
            values_equal(getattr(expected, name), getattr(got, name), f"{where}.{name}")
        return
    if isinstance(expected, (bytes, bytearray, array.array, np.ndarray)) or \
            isinstance(got, np.ndarray):
        a = np.frombuffer(expected, dtype=np.uint8) if isinstance(
            expected, (bytes, bytearray)) else np.asarray(expected)
        b = np.asarray(got)
        assert a.shape == b.shape and np.array_equal(a, b.astype(a.dtype)), where
        return
    if isinstance(expected, (list, tuple)):
        assert len(expected) == len(got), where
        for i, (x, y) in enumerate(zip(expected, got)):
            values_equal(x, y, f"{where}[{i}]")
        return
    assert expected == got, f"{where}: {expected!r} != {got!r}"


def read_back(path: Path) -> list[tuple[str, int, object]]:
    with AnyReader([path], default_typestore=jazzy_typestore()) as reader:
        return [(c.topic, t, reader.deserialize(raw, c.msgtype))
                for c, t, raw in reader.messages()]


@pytest.mark.parametrize("fmt,name", [("mcap", "bag.mcap"), ("sqlite3", "bagdir")])
def test_record_then_read_back_equal_values_on_every_topic(tmp_path, fmt, name):
    expected = list(sim_messages(SMALL))
    summary = record_sim(tmp_path / name, SMALL, fmt, progress=False)
    got = read_back(Path(summary.out))

    topics = {m.topic for m in expected}
    assert topics == set(vars(SIM_TOPICS).values())
    assert {t for t, _, _ in got} == topics
    for topic in sorted(topics):
        want = [m for m in expected if m.topic == topic]
        have = [(t, msg) for tp, t, msg in got if tp == topic]
        assert len(want) == len(have) > 0, topic
        for i, (w, (log_ns, msg)) in enumerate(zip(want, have)):
            assert log_ns == w.log_ns, (topic, i)
            values_equal(w.msg, msg, f"{topic}[{i}]")
    with BagReader(summary.out) as bag:
        assert bag.topics[SIM_TOPICS.image].msgtype == "sensor_msgs/msg/Image"
        assert bag.topics[SIM_TOPICS.compressed].msgtype == "sensor_msgs/msg/CompressedImage"
        bag.check_stamps(bag.topics, strict=[SIM_TOPICS.image])


def test_recorded_values_are_the_simulators(small_bag):
    """Pixels, expert future, boxes, command and velocity as the simulator produced them."""
    got = read_back(small_bag)
    by_topic: dict[str, list] = {}
    for topic, _, msg in got:
        by_topic.setdefault(topic, []).append(msg)
    captures = []
    for episode in range(SMALL.episodes):
        scenario = SMALL.scenarios[episode % len(SMALL.scenarios)]
        _, caps = run_episode(scenario, episode_seed(SMALL.seed, episode), episode,
                              SMALL.episode_config())
        captures += caps
    assert len(by_topic[SIM_TOPICS.image]) == len(captures) == 4
    odometry = {(m.header.stamp.sec, m.header.stamp.nanosec): m
                for m in by_topic[SIM_TOPICS.odometry]}
    for cap, image, path, meta, command in zip(
            captures, by_topic[SIM_TOPICS.image], by_topic[SIM_TOPICS.gt_path],
            by_topic[SIM_TOPICS.gt_meta], by_topic[SIM_TOPICS.command]):
        assert (image.width, image.height, image.encoding) == (64, 36, "rgb8")
        assert np.array_equal(image.data.reshape(36, 64, 3), cap.image)
        waypoints = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        np.testing.assert_allclose(waypoints, cap.ego_future, atol=1e-12)
        assert path.header.frame_id == "base_link"
        assert path.header.stamp == image.header.stamp
        t0 = image.header.stamp.sec * 10**9 + image.header.stamp.nanosec
        assert [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in path.poses] == \
            [t0 + k * 500_000_000 for k in range(1, 9)]
        doc = parse_ground_truth(meta.data)
        assert [b["bbox"] for b in doc["boxes"]] == [list(b.box) for b in cap.boxes]
        assert doc["command"] == command.data == cap.command
        odom = odometry[(image.header.stamp.sec, image.header.stamp.nanosec)]
        np.testing.assert_allclose([odom.twist.twist.linear.x, odom.twist.twist.linear.y],
                                   cap.velocity, atol=1e-12)
        np.testing.assert_allclose([odom.pose.pose.position.x, odom.pose.pose.position.y],
                                   [cap.ego.x, cap.ego.y], atol=1e-12)
    camera = json.loads(by_topic[SIM_TOPICS.camera_json][0].data)
    info = by_topic[SIM_TOPICS.camera_info][0]
    assert camera["fx"] == pytest.approx(info.k[0]) and camera["cy"] == pytest.approx(info.k[5])


def test_record_is_deterministic(tmp_path):
    config = RecordConfig(episodes=1, frames=2, scenarios=("racetrack",), width=48, height=32)
    a, b = tmp_path / "a" / "x.mcap", tmp_path / "b" / "x.mcap"
    record_sim(a, config, progress=False)
    record_sim(b, config, progress=False)
    assert a.read_bytes() == b.read_bytes()


def test_record_sim_cli_refuses_to_overwrite(tmp_path, small_bag):
    out = tmp_path / "taken.mcap"
    out.write_bytes(b"precious")
    proc = subprocess.run([WAMDIFF2, "bag", "record-sim",
                           "--out", str(out), "--frames", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.mcap"]


def test_bundled_sample_bag_is_what_its_documented_command_records(tmp_path):
    """docs/bags.md: `wamdiff2 bag record-sim --out wamdiff2_ros/assets/sample.mcap
    --episodes 3 --frames 6 --seed 0`. Fails when the simulator changed since the sample was
    recorded: record it again with that command."""
    from wamdiff2_ros.tools.demo import SAMPLE_BAG

    fresh = tmp_path / "sample.mcap"           # same file name: the name is in the metadata
    proc = subprocess.run([WAMDIFF2, "bag", "record-sim", "--out", str(fresh), "--episodes",
                           "3", "--frames", "6", "--seed", "0", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert SAMPLE_BAG.stat().st_size <= 10 * 2**20
    assert_same_messages(fresh, SAMPLE_BAG)


def _close(a, b, where: str) -> None:
    """Equal values; floats equal up to 1e-9 (the simulator's last bits differ between CPU
    models: the sample was recorded on another machine)."""
    if hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            _close(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype, where
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-9, err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float):
        assert abs(a - b) <= 1e-9, (where, a, b)
    else:
        assert a == b, (where, a, b)


def assert_same_messages(fresh: Path, sample: Path) -> None:
    """Same topics, types, timestamps and values, message for message."""
    with AnyReader([fresh]) as ra, AnyReader([sample]) as rb:
        got, want = list(ra.messages()), list(rb.messages())
        assert len(got) == len(want), \
            "the bundled sample bag is stale: record it again with the command above"
        for (ca, ta, raw_a), (cb, tb, raw_b) in zip(got, want):
            assert (ca.topic, ca.msgtype, ta) == (cb.topic, cb.msgtype, tb)
            if raw_a != raw_b:
                _close(ra.deserialize(raw_a, ca.msgtype), rb.deserialize(raw_b, cb.msgtype),
                       f"{ca.topic}@{ta}")
