"""Live helpers of the bag tests: `planner_node` as a process, a bag replayed into it with
the `wamdiff2 bag replay` command, its answers matched by the image stamps; a raw listener of
what a replay publishes."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import rclpy
from bag_fixtures import WAMDIFF2
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from visualization_msgs.msg import MarkerArray

from wamdiff2_ros.tools.bag_io import BagReader, header_stamp_ns, message_class
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS, OutputTopics, node_input_remaps
from wamdiff2_ros.tools.demo import node_idle
from wamdiff2_ros.tools.demo_graph import NodeProcess, OutputRecorder, node_state

OUT = OutputTopics()
# The untrained preset, one 32-token block in 4 steps: a fraction of a second per frame;
# no plan cut short by the plan timeout or the Path-gap watchdog on a loaded machine.
# (Constraints off: a constrained plan needs 80 tokens, and these runs time the plumbing.)
FAST_TINY = {"checkpoint": "tiny", "decode.max_new_tokens": 32, "decode.steps_per_block": 4,
             "decode.constrained": False, "plan_timeout_s": 0.0, "max_path_gap_s": 0.0}


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


def camera_stamps(bag_path) -> list[int]:
    with BagReader(bag_path) as bag:
        return [header_stamp_ns(raw) for *_, raw in bag.messages([SIM_TOPICS.image])]


def status_stamps(recorder: OutputRecorder) -> set[int]:
    stamps = set()
    for item in recorder.messages(OUT.markers):
        for m in deserialize_message(item.raw, MarkerArray).markers:
            if m.ns == "wamdiff2/status":
                stamps.add(m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec)
    return stamps


def path_stamps(recorder: OutputRecorder) -> set[int]:
    return {header_stamp_ns(r.raw) for r in recorder.messages(OUT.path)}


def outputs_settled(recorder: OutputRecorder) -> bool:
    """Every frame with a Path has its status and its markers: a lost packet of one topic
    is resent seconds later, and the node publishes a frame's markers last (after
    detection), so its counters can report a frame planned before the recorder has all of
    that frame's messages."""
    paths = path_stamps(recorder)
    statuses = {header_stamp_ns(r.raw) for r in recorder.messages(OUT.status)}
    return paths <= statuses and paths <= status_stamps(recorder)


def replay_into_node(bag_path, domain: int, tmp_path, overrides: dict, rate: float,
                     timeout_s: float, clock: bool = False) -> OutputRecorder:
    """Start the node (one torch thread: robust to other load on the cores), wait until it
    is active, replay with the `wamdiff2 bag replay` command (remapped onto its inputs;
    `clock`: with --clock), and wait until every frame is answered or the node has nothing
    left to plan."""
    node = NodeProcess(domain, tmp_path / "node.log", {"max_input_age_s": 0.0,
                                                       "plan_timeout_s": 0.0,
                                                       "max_path_gap_s": 0.0, **overrides},
                       env={"OMP_NUM_THREADS": "1"})
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
             *(["--clock"] if clock else []),
             "--topics", SIM_TOPICS.image, SIM_TOPICS.odometry, SIM_TOPICS.command,
             "--wait-for", SIM_TOPICS.image, SIM_TOPICS.odometry, SIM_TOPICS.command],
            env=dict(os.environ, ROS_DOMAIN_ID=str(domain)), capture_output=True, text=True,
            timeout=300)
        assert proc.returncode == 0, proc.stderr
        stamps = set(camera_stamps(bag_path))
        recorder.wait(lambda: stamps <= status_stamps(recorder) or
                      node_idle(recorder, len(stamps), len(path_stamps(recorder))), timeout_s)
        assert recorder.wait(lambda: outputs_settled(recorder), 30), \
            "a frame's Path came without its status or markers in 30 s"
        return recorder
    finally:
        recorder.close()
        client.destroy_node()
        rclpy.try_shutdown(context=context)
        assert node.stop() == 0, node.log_tail()
