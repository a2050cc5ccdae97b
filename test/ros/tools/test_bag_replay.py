"""`bag replay`: recorded messages reach live subscribers, at recorded timing, remapped;
Ctrl-C stops cleanly. Real DDS, the real `wamdiff2` command, a ROS_DOMAIN_ID per test."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
import rclpy
from bag_fixtures import WAMDIFF2
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from wamdiff2_ros.tools.bag_io import BagReader, message_class
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS

pytestmark = pytest.mark.ros


class Listener:
    """Raw subscriptions to `topics` (name -> msgtype), recording arrival times."""

    def __init__(self, domain: int, topics: dict[str, str]):
        self.context = Context()
        rclpy.init(args=[], context=self.context, domain_id=domain)
        self.node = rclpy.create_node("bag_replay_test_listener", context=self.context)
        self.lock = threading.Lock()
        self.got: dict[str, list[tuple[float, bytes]]] = {t: [] for t in topics}
        for topic, msgtype in topics.items():
            latched = topic.endswith("camera_json")
            qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=200,
                             reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                             else DurabilityPolicy.VOLATILE)
            self.node.create_subscription(message_class(msgtype), topic,
                                          lambda raw, t=topic: self._add(t, raw), qos,
                                          raw=True)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001
            pass

    def _add(self, topic, raw):
        with self.lock:
            self.got[topic].append((time.monotonic(), bytes(raw)))

    def close(self):
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self.thread.join(5.0)


def _env(domain: int) -> dict:
    return dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")


def test_replayed_messages_equal_the_bag_at_recorded_timing_and_remapped(small_bag,
                                                                          ros_domain):
    with BagReader(small_bag) as bag:
        recorded = {t: [(ns, raw) for _, _, ns, raw in bag.messages([t])] for t in bag.topics}
        types = {t: info.msgtype for t, info in bag.topics.items()}
    remapped = "/replay_test/image"
    listen = {remapped if t == SIM_TOPICS.image else t: ty for t, ty in types.items()}
    listener = Listener(ros_domain, listen)
    try:
        proc = subprocess.run(
            [WAMDIFF2, "bag", "replay", str(small_bag), "--rate", "2",
             "--remap", f"{SIM_TOPICS.image}:={remapped}", "--wait-for", SIM_TOPICS.image,
             SIM_TOPICS.odometry, SIM_TOPICS.gt_meta],
            env=_env(ros_domain), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        total = sum(len(v) for v in recorded.values())
        assert f"done: {total} messages published" in proc.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(listener.got[remapped]) < 4:
            time.sleep(0.1)
    finally:
        listener.close()
    for topic, msgtype in types.items():
        got = listener.got[remapped if topic == SIM_TOPICS.image else topic]
        want = recorded[topic]
        assert len(got) == len(want), topic
        cls = message_class(msgtype)
        for (_, raw_got), (_, raw_want) in zip(got, want):
            # values, not bytes: the transport may pad the payload
            assert deserialize_message(raw_got, cls) == deserialize_message(raw_want, cls)
    # Recorded camera frames at 1.0, 1.5, 3.6, 4.1 s: 3.1 s of bag time, 1.55 s at x2.
    arrivals = [t for t, _ in listener.got[remapped]]
    span = arrivals[-1] - arrivals[0]
    assert 1.2 < span < 2.6, span
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert gaps[1] > 2 * gaps[0]            # the 2.1 s gap between the episodes


def test_ctrl_c_stops_a_looping_replay_cleanly(small_bag, ros_domain):
    proc = subprocess.Popen([WAMDIFF2, "bag", "replay", str(small_bag), "--loop"],
                            env=_env(ros_domain), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(8.0)                              # imports, then a few messages
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped (Ctrl-C)" in err
    assert "Traceback" not in err and "Traceback" not in out


def test_unknown_remap_and_missing_topic_are_one_line_errors(small_bag, ros_domain):
    for extra, message in ((["--topics", "/nope"], "has no topic /nope"),
                           (["--remap", "/nope:=/x"], "not replayed: /nope")):
        proc = subprocess.run([WAMDIFF2, "bag", "replay", str(small_bag), *extra],
                              env=_env(ros_domain), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
