"""The live side of `wamdiff2 demo`: the planner node as a subprocess, and a recorder.

`NodeProcess` starts the installed `planner_node` (the package's params file plus `-p`
overrides) on a ROS_DOMAIN_ID of its own; `OutputRecorder` subscribes to the node's outputs
and /diagnostics as raw CDR bytes (nothing is re-serialised on the way to the bag).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from wamdiff2_ros.node import dds
from wamdiff2_ros.tools.bag_layout import NODE_NAME, TYPES, OutputTopics
from wamdiff2_ros.tools.spin import spin_in_background

PACKAGE = "wamdiff2_ros"
PARAMS_FILE = "wamdiff2.yaml"


class DemoError(Exception):
    """The demo could not run: one sentence (the node's log tail may follow)."""


def find_config_file(name: str) -> Path:
    """A file of the package's config/: the installed package share, else the source
    checkout's."""
    candidates = [Path(sys.prefix) / "share" / PACKAGE / "config" / name,
                  Path(__file__).resolve().parents[2] / "config" / name]
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.insert(0, Path(get_package_share_directory(PACKAGE)) / "config" / name)
    except Exception:  # noqa: BLE001 - no ament index here (pip install without ROS env)
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"no {name} found (looked in "
                            f"{', '.join(str(c.parent) for c in candidates)})")


def find_params_file() -> Path:
    """The node's params file (config/wamdiff2.yaml)."""
    return find_config_file(PARAMS_FILE)


def dds_profile_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a node started by these tools adds to `environ` (default: this process's) for
    DDS, by the launch file's rule: the package's config/fastdds_node.xml where `environ` has
    no DDS setting of its own, else nothing (`wamdiff2_ros.node.dds`)."""
    environ = os.environ if environ is None else environ
    if dds.own_setting(environ):
        return {}
    return dds.node_environment(environ, find_config_file(dds.PROFILE_FILE))


def describe_dds_profile(environ: Mapping[str, str] | None = None) -> str:
    """The DDS setting a node started with `environ` (default: this process's) runs under,
    in words."""
    environ = os.environ if environ is None else environ
    return dds.describe({**environ, **dds_profile_env(environ)})


def node_command() -> list[str]:
    """How to start the node: the `planner_node` console script next to this Python, else
    the module (the same `main`)."""
    script = Path(sys.executable).parent / "planner_node"
    if script.exists():
        return [str(script)]
    found = shutil.which("planner_node")
    return [found] if found else [sys.executable, "-m", "wamdiff2_ros.node.planner_node"]


def ros_value(value: Any) -> str:
    """A Python value as a `-p name:=value` argument."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


class NodeProcess:
    """`planner_node --ros-args --params-file FILE -p k:=v ... -r from:=to ...`, logging to
    `log_path`, in a process group of its own (so it can be paused and stopped whole)."""

    def __init__(self, domain_id: int, log_path: Path, overrides: dict[str, Any],
                 params_file: Path | None = None, env: dict[str, str] | None = None,
                 remaps: dict[str, str] | None = None):
        params_file = params_file or find_params_file()
        self.cmd = [*node_command(), "--ros-args", "--params-file", str(params_file)]
        for name, value in overrides.items():
            self.cmd += ["-p", f"{name}:={ros_value(value)}"]
        for source, target in (remaps or {}).items():
            self.cmd += ["-r", f"{source}:={target}"]
        base = {**os.environ, **(env or {})}
        full_env = dict(base, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED="1",
                        RCUTILS_LOGGING_BUFFERED_STREAM="0", **dds_profile_env(base))
        self.env = full_env
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=full_env, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        """The last `lines` lines of the node's log (also after `stop`, which closes it)."""
        if not self._log.closed:
            self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def pause(self) -> None:
        """Stop the whole process group (SIGSTOP) until `resume`."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:   # it exited between the check and the signal
                pass

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGINT (the node's clean shutdown; a paused node is resumed first), then SIGKILL
        after `timeout_s`; exit code."""
        if self.alive():
            self.resume()
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


@dataclass(frozen=True)
class Received:
    """One message the recorder got."""

    topic: str
    msgtype: str
    at: float              # time.monotonic() on arrival
    raw: bytes


class OutputRecorder:
    """Raw subscriptions to the node's path, markers and /diagnostics, spun in a thread."""

    def __init__(self, node, executor, node_name: str = NODE_NAME):
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Path as PathMsg
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
        from visualization_msgs.msg import MarkerArray

        topics = OutputTopics(node_name)
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50,
                         reliability=ReliabilityPolicy.RELIABLE)
        self._lock = threading.Lock()
        self.received: list[Received] = []
        self.events = threading.Condition(self._lock)
        for topic, cls, msgtype in ((topics.path, PathMsg, TYPES["path"]),
                                    (topics.markers, MarkerArray, TYPES["markers"]),
                                    (topics.status, DiagnosticArray, TYPES["diagnostics"]),
                                    ("/diagnostics", DiagnosticArray, TYPES["diagnostics"])):
            node.create_subscription(cls, topic, lambda raw, t=topic, m=msgtype:
                                     self._record(t, m, raw), qos, raw=True)
        self._executor = executor
        self._executor.add_node(node)
        self._thread = spin_in_background(self._executor, "demo-recorder")

    def _record(self, topic: str, msgtype: str, raw: bytes) -> None:
        with self.events:
            self.received.append(Received(topic, msgtype, time.monotonic(), bytes(raw)))
            self.events.notify_all()

    def messages(self, topic: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.received if topic is None or r.topic == topic]

    def wait(self, predicate, timeout_s: float) -> bool:
        """Wait until `predicate()` is true (checked on every message and every 0.1 s)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if predicate():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self.events:
                self.events.wait(min(0.1, remaining))

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self._thread.join(5.0)


def node_state(raw: bytes) -> str | None:
    """The `state` value of a /diagnostics message from the planner node, if it has one."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.serialization import deserialize_message

    msg = deserialize_message(raw, DiagnosticArray)
    for status in msg.status:
        for kv in status.values:
            if kv.key == "state":
                return kv.value
    return None


def diagnostics_values(raw: bytes) -> dict[str, str]:
    """Key/values of the first status of a /diagnostics message."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.serialization import deserialize_message

    msg = deserialize_message(raw, DiagnosticArray)
    return {kv.key: kv.value for kv in msg.status[0].values} if msg.status else {}
