"""The bench's side of the graph: publishers of the node's inputs and recorders of its
outputs (`wamdiff2 bench node`, `bench soak`)."""
from __future__ import annotations

import threading
import time

from wamdiff2_ros.tools.spin import spin_in_background

NODE = "/wamdiff2_planner"


class NodeClient:
    """Publishes frames (and odometry) to the node; notes when each stamped Path, MarkerArray
    and ~/output/status arrives, how many Paths each stamp got and the source (model,
    last_plan, stop) of each, and counts answers (an empty one: refused)."""

    def __init__(self, domain_id: int, cameras: tuple[str, ...] = ("front",)):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from nav_msgs.msg import Path as PathMsg
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_msgs.msg import String
        from visualization_msgs.msg import MarkerArray

        self._rclpy = rclpy
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("wamdiff2_bench", context=self.context)
        self.arrived: dict[str, dict[int, float]] = {"path": {}, "markers": {}, "status": {}}
        self.sources: dict[int, str] = {}
        self.path_counts: dict[int, int] = {}
        self.source_lists: dict[int, list[str]] = {}
        self.answers = {"answered": 0, "refused": 0}
        self._lock = threading.Lock()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        camera_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        topics = ([f"{NODE}/input/image"] if len(cameras) == 1 else
                  [f"{NODE}/input/{name}/image" for name in cameras])
        # one publisher per camera, the trigger camera's first (`pub`)
        self.pubs = [self.node.create_publisher(Image, t, camera_qos) for t in topics]
        self.pub = self.pubs[0]
        self.odometry_pub = self.node.create_publisher(Odometry, f"{NODE}/input/odometry",
                                                       reliable)
        self.node.create_subscription(PathMsg, f"{NODE}/output/path", self._note_path,
                                      reliable)
        self.node.create_subscription(String, f"{NODE}/output/answer", self._note_answer,
                                      reliable)
        self.node.create_subscription(MarkerArray, f"{NODE}/output/markers",
                                      lambda m: self._note_markers(m), reliable)
        self.node.create_subscription(DiagnosticArray, f"{NODE}/output/status",
                                      self._note_status, reliable)
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = spin_in_background(self._executor, "bench-client")

    def _note(self, key: str, stamp) -> None:
        with self._lock:
            self.arrived[key].setdefault(stamp.sec * 10**9 + stamp.nanosec, time.perf_counter())

    def _note_path(self, msg) -> None:
        stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        with self._lock:
            self.path_counts[stamp] = self.path_counts.get(stamp, 0) + 1
        self._note("path", msg.header.stamp)

    def _note_answer(self, msg) -> None:
        with self._lock:
            self.answers["answered" if msg.data else "refused"] += 1

    def _note_markers(self, msg) -> None:
        for m in msg.markers:
            if m.ns == "wamdiff2/status":
                self._note("markers", m.header.stamp)

    def _note_status(self, msg) -> None:
        stamp = msg.header.stamp
        values = {kv.key: kv.value for kv in msg.status[0].values} if msg.status else {}
        key = stamp.sec * 10**9 + stamp.nanosec
        with self._lock:
            self.sources[key] = values.get("source", "")
            self.source_lists.setdefault(key, []).append(values.get("source", ""))
        self._note("status", stamp)

    def arrival(self, key: str, stamp_ns: int) -> float | None:
        with self._lock:
            return self.arrived[key].get(stamp_ns)

    def source(self, stamp_ns: int) -> str | None:
        """Where the Path for that frame came from (model, last_plan, stop), if it came."""
        with self._lock:
            return self.sources.get(stamp_ns)

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)
