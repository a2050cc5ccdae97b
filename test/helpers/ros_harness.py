"""Two-process ROS test harness: the node as a subprocess, a client node in the test process.

Real DDS, real messages: `NodeProcess` starts the installed `planner_node` console script
with the params file, `RosClient` publishes camera frames and records what comes back.
Each test's processes run on their own ROS_DOMAIN_ID (see conftest.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from nav_msgs.msg import Odometry, Path as PathMsg
from rcl_interfaces.msg import Parameter, ParameterValue, ParameterType
from rcl_interfaces.srv import GetParameters, SetParameters, SetParametersAtomically
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from wamdiff2_ros.node.dds import node_environment
from wamdiff2_ros.tools.demo_graph import ros_value

REPO = Path(__file__).resolve().parents[2]
PARAMS_FILE = REPO / "config" / "wamdiff2.yaml"
DDS_PROFILE = REPO / "config" / "fastdds_node.xml"     # what the launch file gives the node
NODE = "/wamdiff2_planner"
# Untrained-preset settings that keep one decode short on a 2-core CPU: one block of 32
# tokens in 4 denoising steps. The params file stays the base; these are overrides. Tests
# that send no odometry do not require it, and on a loaded machine no plan is cut short by
# the plan timeout or the Path-gap watchdog (odometry freshness, timeouts and the watchdog
# have tests of their own). Constraints are off: a constrained plan needs 80 tokens, and
# these runs time the plumbing.
FAST_TINY = {"checkpoint": "tiny", "decode.max_new_tokens": 32, "decode.steps_per_block": 4,
             "decode.constrained": False, "max_odometry_age_s": 0.0, "plan_timeout_s": 0.0,
             "max_path_gap_s": 0.0}


def launch_env(domain: int) -> dict[str, str]:
    """The environment of a `ros2 launch` run on ROS domain `domain`: this venv's ament
    index and executables first."""
    bin_dir = Path(sys.executable).parent
    return dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1",
                AMENT_PREFIX_PATH=str(bin_dir.parent), PATH=f"{bin_dir}:{os.environ['PATH']}")


def interrupt(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGINT to `proc` if it still runs, as Ctrl-C would; killed when not gone after
    `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def launch_missing(*modules: str) -> str | None:
    """Why `ros2 launch` cannot run here (launch_ros, the other `modules` or the ros2 command
    line missing: no registry serves them), or None."""
    import importlib

    for name in ("launch_ros", *modules):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{exc.name} is not installed (bash ../shared/rosenv/build.sh .venv adds it)"
    if not (Path(sys.executable).parent / "ros2").exists():
        return "the ros2 command line is not installed (../shared/rosenv/build.sh adds it)"
    return None


def domain_id(key: str) -> int:
    """A ROS_DOMAIN_ID in 1..101 derived from `key` and this process id.

    Different tests (and two test runs on one machine: their pids differ) almost always get
    different domains, so tests do not see each other's nodes.
    """
    return 1 + zlib.crc32(f"{key}:{os.getpid()}".encode()) % 101


def planner_node_executable() -> str:
    """The installed console script (what `ros2 run wamdiff2_ros planner_node` runs)."""
    exe = Path(sys.executable).parent / "planner_node"
    if not exe.exists():
        raise FileNotFoundError(f"{exe} is missing: install the package (pip install -e .)")
    return str(exe)


class NodeProcess:
    """`planner_node --ros-args --params-file config/wamdiff2.yaml [-p name:=value ...]`,
    with the shipped Fast DDS profile where the environment has no DDS setting of its own
    (the launch file's rule); `ros_args`: more ROS arguments (``["-r", "__ns:=/ego"]``)."""

    def __init__(self, domain: int, log_dir: Path, overrides: dict | None = None,
                 extra_env: dict | None = None, ros_args: list[str] | None = None):
        cmd = [planner_node_executable(), "--ros-args", "--params-file", str(PARAMS_FILE)]
        for name, value in (overrides or {}).items():
            cmd += ["-p", f"{name}:={ros_value(value)}"]
        cmd += list(ros_args or [])
        env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1",
                   RCUTILS_LOGGING_BUFFERED_STREAM="0", **(extra_env or {}))
        env.update(node_environment(env, DDS_PROFILE))     # the launch file's rule
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path, self.stderr_path = log_dir / "node.out", log_dir / "node.err"
        self._out = open(self.stdout_path, "w")
        self._err = open(self.stderr_path, "w")
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=self._err, env=env,
                                     cwd=REPO)

    def output(self) -> str:
        return self.stdout_path.read_text() + self.stderr_path.read_text()

    def rss_mb(self) -> float:
        """Resident memory of the node process."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        raise RuntimeError("VmRSS not found")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def sigint(self, timeout: float = 60.0) -> int:
        """Send SIGINT and wait for the exit code."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()
        self._err.close()


def stamp_msg(t: float) -> Time:
    sec = int(t)
    return Time(sec=sec, nanosec=int(round((t - sec) * 1e9)) % 1_000_000_000)


def stamp_s(stamp: Time) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def rgb_image_msg(rgb: np.ndarray, t: float, frame_id: str = "camera_front") -> Image:
    """A sensor_msgs/Image (rgb8) holding `rgb` (H, W, 3) uint8."""
    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", is_bigendian=0,
                step=rgb.shape[1] * 3)
    msg.header.stamp, msg.header.frame_id = stamp_msg(t), frame_id
    msg.data = rgb.tobytes()
    return msg


def diag_values(msg: DiagnosticArray) -> dict[str, str]:
    return {kv.key: kv.value for kv in msg.status[0].values} if msg.status else {}


def status_stamp(msg: MarkerArray) -> float | None:
    """Stamp of the frame a MarkerArray answers: its `wamdiff2/status` marker's stamp."""
    for m in msg.markers:
        if m.ns == "wamdiff2/status":
            return stamp_s(m.header.stamp)
    return None


class RosClient:
    """The test side: publishers to the node's inputs, recorders of its outputs (`node`: the
    planner's full name, e.g. /ego/wamdiff2_planner)."""

    def __init__(self, domain: int, name: str = "wamdiff2_test_client", node: str = NODE,
                 camera_qos: QoSProfile | None = None):
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node(name, context=self.context)
        self.target = node
        base = node
        self._lock = threading.Lock()
        self.received: dict[str, list[tuple[float, Any]]] = {
            k: [] for k in ("path", "markers", "answer", "status", "stats", "diagnostics")}
        camera_qos = camera_qos or QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                                              reliability=ReliabilityPolicy.RELIABLE)
        small = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                           reliability=ReliabilityPolicy.RELIABLE)
        self.image_pub = self.node.create_publisher(Image, f"{base}/input/image", camera_qos)
        self.compressed_pub = self.node.create_publisher(
            CompressedImage, f"{base}/input/image/compressed", camera_qos)
        self.odometry_pub = self.node.create_publisher(Odometry, f"{base}/input/odometry",
                                                       small)
        self.command_pub = self.node.create_publisher(String, f"{base}/input/command", small)
        self.question_pub = self.node.create_publisher(String, f"{base}/input/question",
                                                       small)
        for key, msg_type, topic in (("path", PathMsg, f"{base}/output/path"),
                                     ("markers", MarkerArray, f"{base}/output/markers"),
                                     ("answer", String, f"{base}/output/answer"),
                                     ("status", DiagnosticArray, f"{base}/output/status"),
                                     ("stats", DiagnosticArray, f"{base}/output/stats"),
                                     ("diagnostics", DiagnosticArray, "/diagnostics")):
            self.node.create_subscription(msg_type, topic,
                                          lambda msg, k=key: self._record(k, msg), small)
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - the context shut down under us
            pass

    def _record(self, key: str, msg: Any) -> None:
        with self._lock:
            self.received[key].append((time.monotonic(), msg))

    def now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def messages(self, key: str) -> list[tuple[float, Any]]:
        with self._lock:
            return list(self.received[key])

    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
                 poll: float = 0.02) -> Any:
        """The first truthy value of `predicate()` within `timeout` s; AssertionError after."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(poll)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

    def wait_matched(self, publisher, timeout: float = 30.0) -> None:
        self.wait_for(lambda: publisher.get_subscription_count() > 0, timeout,
                      f"a subscriber on {publisher.topic_name}")

    def wait_ready(self, node: NodeProcess | None = None, timeout: float = 120.0) -> None:
        """Until the node reports state `active` on /diagnostics (it has warmed up)."""
        def ready():
            if node is not None and not node.alive():
                raise AssertionError(f"node exited ({node.proc.returncode}):\n{node.output()}")
            return any(diag_values(m).get("state") == "active"
                       for _, m in self.messages("diagnostics"))
        self.wait_for(ready, timeout, "the node to report state active")

    def diagnostics_with(self, predicate: Callable[[Any, dict], bool]) -> list:
        return [m for _, m in self.messages("diagnostics")
                if m.status and predicate(m.status[0], diag_values(m))]

    def markers_for(self, stamp: float) -> MarkerArray | None:
        for _, m in self.messages("markers"):
            s = status_stamp(m)
            if s is not None and abs(s - stamp) < 1e-6:
                return m
        return None

    def publish_frame(self, rgb: np.ndarray, t: float | None = None) -> float:
        t = self.now() if t is None else t
        self.image_pub.publish(rgb_image_msg(rgb, t))
        return t

    def wait_answered(self, stamp: float, timeout: float = 60.0) -> MarkerArray:
        """The MarkerArray the node published after planning the frame stamped `stamp`."""
        return self.wait_for(lambda: self.markers_for(stamp), timeout,
                             f"the node's answer to frame {stamp:.3f}")

    def status_for(self, stamp: float) -> dict | None:
        """The ~/output/status values (source, reason, ...) of the Path for that frame."""
        for _, m in self.messages("status"):
            if abs(stamp_s(m.header.stamp) - stamp) < 1e-6 and m.status:
                return {kv.key: kv.value for kv in m.status[0].values}
        return None

    def stats_for(self, stamp: float) -> dict | None:
        """The ~/output/stats values of that frame (``planning.text``: the model's answer)."""
        for _, m in self.messages("stats"):
            if abs(stamp_s(m.header.stamp) - stamp) < 1e-6 and m.status:
                return {kv.key: kv.value for kv in m.status[0].values}
        return None

    def wait_status(self, stamp: float, timeout: float = 60.0) -> dict:
        return self.wait_for(lambda: self.status_for(stamp), timeout,
                             f"the status of the Path for frame {stamp:.3f}")

    def publish_odometry(self, t: float, vx: float = 0.0, x: float = 0.0) -> None:
        msg = Odometry()
        msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp_msg(t), "odom", \
            "base_link"
        msg.pose.pose.position.x, msg.pose.pose.orientation.w = x, 1.0
        msg.twist.twist.linear.x = vx
        self.odometry_pub.publish(msg)

    def counter(self, name: str) -> int:
        """The largest value of a /diagnostics counter seen so far."""
        return max((int(diag_values(m).get(name, 0)) for _, m in self.messages("diagnostics")),
                   default=0)

    # -------------------------------------------------------------- services
    def _call(self, srv_type, name: str, request, timeout: float = 60.0):
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise AssertionError(f"service {name} not available")
            future = client.call_async(request)
            self.wait_for(future.done, timeout, f"a reply from {name}")
            return future.result()
        finally:
            self.node.destroy_client(client)

    def set_parameters(self, values: dict, atomically: bool = False):
        """Set parameters on the node; the SetParametersResult list (one for atomic)."""
        params = [Parameter(name=k, value=_parameter_value(v)) for k, v in values.items()]
        if atomically:
            req = SetParametersAtomically.Request(parameters=params)
            return [self._call(SetParametersAtomically,
                               f"{self.target}/set_parameters_atomically", req).result]
        req = SetParameters.Request(parameters=params)
        return self._call(SetParameters, f"{self.target}/set_parameters", req).results

    def get_parameters(self, names: list[str]) -> list:
        req = GetParameters.Request(names=names)
        return self._call(GetParameters, f"{self.target}/get_parameters", req).values

    def lifecycle(self, transition: int, timeout: float = 300.0) -> bool:
        req = ChangeState.Request(transition=Transition(id=transition))
        return self._call(ChangeState, f"{self.target}/change_state", req,
                          timeout=timeout).success

    def lifecycle_state(self) -> str:
        return self._call(GetState, f"{self.target}/get_state",
                          GetState.Request()).current_state.label

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self._thread.join(5.0)


def _parameter_value(v: Any) -> ParameterValue:
    if isinstance(v, bool):
        return ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=v)
    if isinstance(v, int):
        return ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=v)
    if isinstance(v, float):
        return ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=v)
    if isinstance(v, str):
        return ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=v)
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY,
                              string_array_value=list(v))
    raise TypeError(f"unsupported parameter value {v!r}")
