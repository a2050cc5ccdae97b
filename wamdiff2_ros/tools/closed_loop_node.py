"""`wamdiff2 eval closed-loop --through-node`: the real `planner_node` plans, over DDS, for the
simulator, which is a ROS 2 participant of its own (docs/simulation.md, "Through the node").

:class:`NodeSource` is a plan source of ``wamdiff2_core.sim.closed_loop`` (blocking for the
``sync`` and ``latency-model`` time modes, streaming for ``realtime``):

- It starts the `planner_node` executable (``NodeProcess``: the shipped params file, the
  run's overrides — checkpoint, decoding, ``use_sim_time:=true`` — and remaps of the node's
  inputs onto the simulator's topics, the bag layout's names) on the run's own
  ROS_DOMAIN_ID, and waits until the node answers a blank probe frame (it loads and warms
  up the model first; a slow start is waited for up to ``start_timeout_s``). The answer,
  not the subscription count, is the test: a killed node's endpoints stay in the graph for
  its DDS lease time.
- The simulator publishes ``/clock`` and the odometry at every 10 Hz control step, and per
  camera frame the navigation command and then the image (a rig: each camera's on
  ``/camera/<name>/image_raw``, the trigger camera's last; the node gets ``cameras``), all
  stamped in simulation time.
- It listens to the node's ``~/output/path`` and ``~/output/stats`` by their documented
  names. A frame's answer is complete when its stats have come and, where they say a Path
  was published, that Path too; the Path's stamp says which frame it answers and its
  frame id where it lies (``base_link``: the ego at that stamp; ``odom``: the simulator's
  map frame, which is what its odometry reports).
- A node that exits, or does not answer within ``answer_timeout_s``, raises
  ``PlannerUnavailable``: that episode fails with the reason, the node is stopped, and the
  next episode starts a fresh one. ``close()`` stops every process it started.

Clock: simulation time ``t`` of episode ``k`` is published as ``START_TIME_NS + offset_k +
t``, each episode starting a second after the previous one ended, so that time never runs
backwards (the node rejects odometry older than what it has seen). DDS: Fast DDS over UDP
only (``FASTDDS_BUILTIN_TRANSPORTS=UDPv4``) for both sides, because ``realtime`` pauses the
node's process (SIGSTOP) while the simulator computes and a process stopped inside a
shared-memory transport lock would stall the simulator's own publishing.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.sim.plan_sources import CameraFrame, EgoTick, PlannerUnavailable, PlanOutcome
from wamdiff2_ros.tools.bag_layout import (BASE_FRAME, NODE_NAME, ODOM_FRAME, SIM_TOPICS,
                                           OutputTopics, camera_frame, node_input_remaps,
                                           sim_camera_topics)
from wamdiff2_ros.tools.bag_record import EPISODE_GAP_NS, START_TIME_NS, image_msg, odometry_msg
from wamdiff2_ros.tools.demo_graph import NodeProcess, dds_profile_env
from wamdiff2_ros.tools.spin import spin_in_background

DDS_ENV = {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}
PROBE_EVERY_S = 2.0            # until the new node answers a blank frame: it is ready
PROBE_IMAGE = np.zeros((180, 320, 3), np.uint8)


@dataclass(frozen=True)
class NodeSourceConfig:
    """How to start and talk to the node."""

    overrides: dict[str, Any]                 # -p name:=value (checkpoint, decoding, ...)
    params_file: Path | None = None           # None: the package's config/wamdiff2.yaml
    domain_id: int = 0                        # 0: derived from this process's id
    start_timeout_s: float = 300.0
    answer_timeout_s: float = 10.0            # blocking plans: wall seconds per answer
    log_dir: Path = Path("runs/eval/closed-loop")
    node_name: str = NODE_NAME
    env: dict[str, str] = field(default_factory=dict)
    cameras: tuple[str, ...] = ("front",)     # the rig's camera names, the trigger's first

    def resolved_domain(self) -> int:
        return self.domain_id or 1 + os.getpid() % 101


@dataclass
class _Answer:
    stats: dict[str, str] | None = None
    stats_wall: float = 0.0
    path: tuple[np.ndarray, str] | None = None      # (points (N, 2), frame id)
    path_wall: float = 0.0


class _Participant:
    """The simulator's side of the graph: its publishers, the node's outputs, a spin thread."""

    def __init__(self, domain_id: int, node_name: str, cameras: tuple[str, ...] = ("front",)):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from nav_msgs.msg import Path as PathMsg
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import Image
        from std_msgs.msg import String

        self._rclpy, self._clock_type, self._string = rclpy, Clock, String
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("wamdiff2_sim", context=self.context)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        one = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        self.clock_pub = self.node.create_publisher(Clock, "/clock", one)
        self.cameras = cameras
        topics = [SIM_TOPICS.image] if len(cameras) == 1 else \
            [sim_camera_topics(name).image for name in cameras]
        self.image_pubs = [self.node.create_publisher(Image, t, one) for t in topics]
        self.odometry_pub = self.node.create_publisher(Odometry, SIM_TOPICS.odometry, reliable)
        # latched, as a navigation stack sends it: it meets the node's latched-command
        # subscription too, with no incompatible-QoS warning (docs/ros.md, "QoS")
        self.command_pub = self.node.create_publisher(String, SIM_TOPICS.command, QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        outputs = OutputTopics(node_name)
        self.output_topics = (outputs.path, outputs.stats)
        self._lock = threading.Condition()
        self.answers: dict[int, _Answer] = {}
        self.node.create_subscription(PathMsg, outputs.path, self._path_callback,
                                      QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
        self.node.create_subscription(DiagnosticArray, outputs.stats, self._stats_callback,
                                      QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = spin_in_background(self._executor, "sim-ros")

    @staticmethod
    def _ns(stamp) -> int:
        return stamp.sec * 1_000_000_000 + stamp.nanosec

    def _path_callback(self, msg) -> None:
        points = np.array([[p.pose.position.x, p.pose.position.y] for p in msg.poses],
                          dtype=np.float64).reshape(-1, 2)
        with self._lock:
            answer = self.answers.setdefault(self._ns(msg.header.stamp), _Answer())
            answer.path, answer.path_wall = (points, msg.header.frame_id), time.perf_counter()
            self._lock.notify_all()

    def _stats_callback(self, msg) -> None:
        if not msg.status:
            return
        values = {kv.key: kv.value for kv in msg.status[0].values}
        values["message"] = msg.status[0].message
        with self._lock:
            answer = self.answers.setdefault(self._ns(msg.header.stamp), _Answer())
            answer.stats, answer.stats_wall = values, time.perf_counter()
            self._lock.notify_all()

    def wait(self, timeout_s: float) -> None:
        """Sleep until a message arrives or ``timeout_s`` passes."""
        with self._lock:
            self._lock.wait(timeout_s)

    def take(self, stamp_ns: int) -> _Answer | None:
        """The complete answer to frame ``stamp_ns`` (removed), or None while incomplete."""
        with self._lock:
            answer = self.answers.get(stamp_ns)
            if answer is None or answer.stats is None:
                return None
            if answer.stats.get("planning.published") == "true" and answer.path is None:
                return None
            return self.answers.pop(stamp_ns)

    def forget(self) -> None:
        with self._lock:
            self.answers.clear()

    def ready(self) -> bool:
        """The node subscribes to every input and publishes both outputs we listen to."""
        pubs = (*self.image_pubs, self.odometry_pub, self.command_pub)
        return (all(p.get_subscription_count() > 0 for p in pubs)
                and all(self.node.count_publishers(t) > 0 for t in self.output_topics))

    def clock(self, stamp_ns: int) -> None:
        msg = self._clock_type()
        msg.clock.sec, msg.clock.nanosec = divmod(stamp_ns, 1_000_000_000)
        self.clock_pub.publish(msg)

    def odometry(self, stamp_ns: int, ego: EgoTick) -> None:
        self.odometry_pub.publish(odometry_msg(stamp_ns, ego.xy[0], ego.xy[1], ego.yaw,
                                               ego.velocity, ego.yaw_rate))

    def frame(self, stamp_ns: int, command: str, images: list[np.ndarray]) -> None:
        """The command, then each camera's image, the trigger (first) camera's last."""
        self.command_pub.publish(self._string(data=command))
        order = [*range(1, len(self.cameras)), 0]
        for i in order:
            self.image_pubs[i].publish(image_msg(images[i], stamp_ns,
                                                 camera_frame(self.cameras[i])))

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self._thread.join(5.0)
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)


#: The node's failure counters (``planning.failure`` in its stats) as plan-source failures;
#: anything else (a timeout, stale odometry, no pose) counts as a model error.
NODE_FAILURES = {"parse_failures": "parse_failure", "model_errors": "model_error"}


def _outcome(answer: _Answer, stamp: float, node_name: str) -> PlanOutcome:
    """A complete answer as a PlanOutcome (received_wall: when its last part arrived)."""
    values = answer.stats
    stats = DecodeStats(decode_ms=float(values.get("planning.ms", 0.0)),
                        tokens=int(values.get("planning.tokens", 0)),
                        forwards=int(values.get("planning.forwards", 0)),
                        denoise_forwards=int(values.get("planning.denoise_forwards", 0)),
                        blocks=int(values.get("planning.blocks", 0)))
    compute_s = stats.decode_ms / 1e3
    if values.get("planning.published") != "true" or \
            values.get("planning.source", "model") != "model":
        # no Path, or the node's fallback (last plan re-timed, stop): the simulator's own
        # fallback follows the last valid plan as in the synchronous mode, so both modes
        # count the same failures
        failure = NODE_FAILURES.get(values.get("planning.failure", ""), "model_error")
        return PlanOutcome(stamp, None, failure, values.get("message", ""), stats=stats,
                           compute_s=compute_s, received_wall=answer.stats_wall)
    points, frame_id = answer.path
    wall = max(answer.stats_wall, answer.path_wall)
    if frame_id not in (BASE_FRAME, ODOM_FRAME):
        return PlanOutcome(stamp, None, "invalid_plan", f"{node_name} published its Path in "
                           f"frame {frame_id!r}, neither {BASE_FRAME} nor {ODOM_FRAME}",
                           stats=stats, compute_s=compute_s, received_wall=wall)
    return PlanOutcome(stamp, points, frame="ego" if frame_id == BASE_FRAME else "map",
                       stats=stats, compute_s=compute_s, received_wall=wall)


class NodeSource:
    """The planner node as a plan source (see the module docstring)."""

    name = "node"
    streaming = True

    def __init__(self, config: NodeSourceConfig):
        self.config = config
        self.domain_id = config.resolved_domain()
        # the node keeps the DDS setting the launch file's rule gives it under the caller's
        # environment (UDP only, as DDS_ENV, for the package's profile)
        self._env = {**DDS_ENV, **config.env,
                     **dds_profile_env({**os.environ, **config.env})}
        self._saved_env = {k: os.environ.get(k) for k in self._env}
        os.environ.update(self._env)        # this process's participant: the same transport
        self._participant = _Participant(self.domain_id, config.node_name, config.cameras)
        self.process: NodeProcess | None = None
        self.starts = 0
        self._base_ns = START_TIME_NS
        self._last_ns = START_TIME_NS
        self._expected: dict[int, float] = {}         # stamp_ns -> frame stamp [s]

    # ------------------------------------------------------------------ clock
    def _ns(self, t: float) -> int:
        return self._base_ns + round(t * 1e9)

    def _publish_clock(self, t: float) -> None:
        ns = self._ns(t)
        if ns > self._last_ns:             # never backwards: the node's clock follows it
            self._participant.clock(ns)
            self._last_ns = ns

    # ------------------------------------------------------------------ node process
    def _log_path(self) -> Path:
        return Path(self.config.log_dir) / f"planner_node_{self.starts}.log"

    def _dead(self) -> str | None:
        if self.process is not None and not self.process.alive():
            tail = self.process.log_tail(3).replace("\n", " | ")
            return (f"planner_node exited with code {self.process.proc.returncode} "
                    f"(log {self.process.log_path}: {tail})")
        return None

    def _start_node(self) -> None:
        self.starts += 1
        # The simulator is the clock: its stamps are never ahead of its own time, but the node
        # may read a frame before the /clock message published just before it (another
        # topic, another callback), which its future-stamp check would drop; so it is off
        # here (a --node-param max_future_s:=... still wins).
        overrides = {"use_sim_time": True, "max_future_s": 0.0,
                     "cameras": list(self.config.cameras), **self.config.overrides}
        remaps = {node: sim for sim, node in node_input_remaps(
            self.config.node_name, cameras=self.config.cameras).items()}
        self.process = NodeProcess(self.domain_id, self._log_path(), overrides,
                                   self.config.params_file, env=self._env, remaps=remaps)
        deadline = time.monotonic() + self.config.start_timeout_s
        probe_ns, probed_at = self._last_ns + 1_000_000, -PROBE_EVERY_S
        while self._participant.take(probe_ns) is None:
            dead = self._dead()
            if dead:
                raise PlannerUnavailable(f"{dead} while starting")
            if time.monotonic() > deadline:
                self._stop_node()
                raise PlannerUnavailable(f"planner_node did not come up within "
                                         f"{self.config.start_timeout_s:g} s (log "
                                         f"{self._log_path()})")
            if self._participant.ready() and time.monotonic() - probed_at > PROBE_EVERY_S:
                self._participant.clock(probe_ns)
                self._participant.frame(probe_ns, "straight",
                                        [PROBE_IMAGE] * len(self.config.cameras))
                probed_at = time.monotonic()
            self._participant.wait(0.1)
        self._last_ns = probe_ns

    def _stop_node(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    # ------------------------------------------------------------------ PlanSource
    def begin_episode(self, index: int, scenario: str, seed: int) -> None:
        self._base_ns = self._last_ns + EPISODE_GAP_NS
        self._expected.clear()
        self._participant.forget()
        if self.process is None:
            self._start_node()
        self._publish_clock(0.0)

    def tick(self, ego: EgoTick) -> None:
        dead = self._dead()
        if dead:
            raise PlannerUnavailable(dead)
        self._publish_clock(ego.time)
        self._participant.odometry(self._ns(ego.time), ego)

    def submit(self, frame: CameraFrame) -> None:
        ns = self._ns(frame.stamp)
        self._expected[ns] = frame.stamp
        self._participant.frame(ns, frame.observation.command, frame.observation.images)

    def poll(self) -> list[PlanOutcome]:
        out = []
        for ns in sorted(self._expected):
            answer = self._participant.take(ns)
            if answer is not None:
                out.append(_outcome(answer, self._expected.pop(ns), self.config.node_name))
        dead = None if out else self._dead()
        if dead:
            raise PlannerUnavailable(dead)
        return sorted(out, key=lambda o: o.received_wall)

    def plan(self, frame: CameraFrame, start_s: float) -> PlanOutcome:
        """Publish the frame with the clock at ``start_s`` and wait for its answer."""
        self._publish_clock(start_s)
        self.submit(frame)
        ns = self._ns(frame.stamp)
        deadline = time.monotonic() + self.config.answer_timeout_s
        while True:
            answer = self._participant.take(ns)
            if answer is not None:
                self._expected.pop(ns, None)
                return _outcome(answer, frame.stamp, self.config.node_name)
            dead = self._dead()
            if dead:
                raise PlannerUnavailable(dead)
            if time.monotonic() > deadline:
                raise PlannerUnavailable(f"no answer from planner_node within "
                                         f"{self.config.answer_timeout_s:g} s")
            self._participant.wait(0.05)

    def pause(self) -> None:
        if self.process is not None:
            self.process.pause()

    def resume(self) -> None:
        if self.process is not None:
            self.process.resume()

    def end_episode(self, failure: str | None) -> None:
        self.resume()
        if failure is not None:
            self._stop_node()             # hung or dead: the next episode starts a fresh one

    def describe(self) -> dict:
        """For the report: how the node was run."""
        return {"node_starts": self.starts, "ros_domain_id": self.domain_id,
                "overrides": {k: v for k, v in self.config.overrides.items()},
                "params_file": str(self.config.params_file or "config/wamdiff2.yaml"),
                "dds": self._env, "node_logs": str(self.config.log_dir)}

    def close(self) -> None:
        """Stop the node and leave the graph; safe to call more than once."""
        self._stop_node()
        if self._participant is not None:
            self._participant.close()
            self._participant = None
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
