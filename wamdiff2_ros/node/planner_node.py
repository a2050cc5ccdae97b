"""The `planner_node` executable: the `wamdiff2_planner` lifecycle node.

Receiving callbacks (their own reentrant callback group, multi-threaded executor) only
convert messages and put the newest frame in a one-frame slot; a worker thread plans.
configure = load the model and warm it up; activate = subscribe and start planning. With
the `autostart` parameter (default true) the node configures and activates itself.
"""
from __future__ import annotations

import functools
import signal
import sys
import threading
import time
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import Image
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from wamdiff2_core.tasks import COMMANDS
from wamdiff2_ros.node import outputs, params, qos
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.diagnostics import ERROR, WARN, NodeStats, diagnostic_array
from wamdiff2_ros.node.images import compressed_to_rgb, image_to_rgb
from wamdiff2_ros.node.odometry import OdometryTracker, sample_from_msg
from wamdiff2_ros.node.planning import Outputs, PlanningHandler
from wamdiff2_ros.node.topics import (ANSWER_TOPIC, COMMAND_TOPIC, DETECTIONS_TOPIC,
                                      DIAGNOSTICS_TOPIC, MARKERS_TOPIC, ODOMETRY_TOPIC, PATH_TOPIC,
                                      QUESTION_TOPIC, camera_topics)
from wamdiff2_ros.node.worker import Frame, PlanningWorker, WorkQueue

NODE_NAME = "wamdiff2_planner"
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


def guarded(callback):
    """A receiving callback that reports an unexpected exception instead of raising it.

    The conversions raise BadInput for everything foreseen; this catches the rest (a bug, a
    message no one imagined), so no single message can stop the node.
    """
    @functools.wraps(callback)
    def wrapper(self, *args):
        try:
            return callback(self, *args)
        except Exception as exc:  # noqa: BLE001
            self.stats.problem(ERROR, "callback_errors", f"{callback.__name__}: "
                               f"{type(exc).__name__}: {exc}")
            self.get_logger().error(f"{callback.__name__} failed: {exc!r}")
            self.report()
    return wrapper


def _stamp_s(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class PlannerNode(LifecycleNode):
    """Cameras, odometry, commands and questions in; Path, markers, answers, diagnostics out."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self._values = params.declare(self)             # raises on out-of-range overrides
        self.config = params.node_config(self._values)  # raises ValueError with the reason
        self._lock = threading.Lock()
        self._planner = None                 # wamdiff2_core.planner.Planner once configured
        self._staged: tuple[dict, params.NodeConfig, Any] | None = None
        self._command = self.config.default_command
        self._other_images: dict[int, tuple[Any, float]] = {}
        self._subscriptions_io: list = []
        self._worker: PlanningWorker | None = None
        self._queue = WorkQueue()
        self.stats = NodeStats()
        self._odometry = OdometryTracker()
        self._inputs = ReentrantCallbackGroup()

        # Diagnostics report in every state; results only while active (lifecycle publishers).
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        self._path_pub = self.create_lifecycle_publisher(Path, PATH_TOPIC, qos.OUTPUT_QOS)
        self._markers_pub = self.create_lifecycle_publisher(MarkerArray, MARKERS_TOPIC,
                                                            qos.OUTPUT_QOS)
        self._answer_pub = self.create_lifecycle_publisher(String, ANSWER_TOPIC,
                                                           qos.OUTPUT_QOS)
        self._detections_pub = None
        if outputs.HAVE_VISION_MSGS:
            self._detections_pub = self.create_lifecycle_publisher(
                outputs.Detection2DArray, DETECTIONS_TOPIC, qos.OUTPUT_QOS)
        self._handler = PlanningHandler(
            lambda: self._planner, lambda: self.config, lambda: self._command,
            self._odometry, self.stats,
            Outputs(self._path_pub.publish, self._markers_pub.publish,
                    self._answer_pub.publish,
                    self._detections_pub.publish if self._detections_pub else None,
                    self.report),
            self.get_logger())
        self._diag_timer = self.create_timer(self.config.diagnostics_period_s,
                                             self._diagnostics_callback)
        self.add_on_set_parameters_callback(self._validate_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)
        self._set_state("unconfigured")

    # ------------------------------------------------------------ diagnostics
    def _set_state(self, state: str) -> None:
        self.stats.state = state

    def report(self, level: bytes | None = None, message: str | None = None) -> None:
        """Publish the node's DiagnosticArray now (the worst recent problem unless given)."""
        device = self.config.device
        msg = diagnostic_array(self.stats, f"{self.get_name()}: planner",
                               f"wamdiff2 {self.config.checkpoint or 'bundled'} on {device}",
                               self.get_clock().now().to_msg(), level, message)
        try:
            self._diag_pub.publish(msg)
        except Exception:  # noqa: BLE001 - the context may be shutting down
            pass

    def _diagnostics_callback(self) -> None:
        self.report()

    def _bad_input(self, exc: BadInput, level: bytes = WARN) -> None:
        self.stats.problem(level, exc.kind, str(exc), bad_input=True)
        self.get_logger().warning(f"dropped input ({exc.kind}): {exc}")
        self.report(level, f"{exc.kind}: {exc}")

    # ------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self.config
        self._set_state("configuring")
        plan = f"; planning: {cfg.plan_decode}" if cfg.plan_decode else ""
        self.get_logger().info(f"loading {cfg.checkpoint or 'the bundled model'} on "
                               f"{cfg.device} ({cfg.decode}{plan})")
        try:
            # torch loads here, not at import: bad parameters and Ctrl-C during start-up are
            # handled by main() before the slow import.
            from wamdiff2_core.planner import Planner

            planner = Planner.from_pretrained(cfg.checkpoint, decode=cfg.decode,
                                              device=cfg.device, dtype=cfg.dtype,
                                              backend=cfg.backend,
                                              plan_decode=cfg.plan_decode)
            stats = planner.warmup()
        except Exception as exc:  # noqa: BLE001 - a failed configure leaves us unconfigured
            self._set_state("unconfigured")
            self.stats.problem(ERROR, "configure_failed", f"{type(exc).__name__}: {exc}")
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            self.report()
            return FAILURE
        self._planner = planner
        self.get_logger().info(f"warmed up ({stats.total_ms:.0f} ms)")
        self._set_state("inactive")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)            # enable the publishers first
        self._queue = WorkQueue()
        self._worker = PlanningWorker(self._queue, self._plan_frame, self._handler.on_question,
                                      self._min_period, self._worker_crashed)
        self._worker.start()
        self._subscribe()
        self._set_state("active")
        self.get_logger().info("ready: planning on " + ", ".join(
            s.topic_name for s in self._subscriptions_io))
        self.report()
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_io()
        self._set_state("inactive")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._planner = None
        self._set_state("unconfigured")
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_io()
        self._planner = None
        self._set_state("finalized")
        return super().on_shutdown(state)

    def start(self) -> bool:
        """configure + activate (the `autostart` path); False if a transition failed."""
        if self.trigger_configure() != SUCCESS:
            return False
        return self.trigger_activate() == SUCCESS

    def close(self) -> None:
        """Stop planning and release the model; safe to call more than once."""
        self._stop_io()
        self._planner = None

    def _stop_io(self) -> None:
        for sub in self._subscriptions_io:
            self.destroy_subscription(sub)
        self._subscriptions_io = []
        if self._worker is not None:
            if not self._worker.stop(timeout=60.0):
                self.get_logger().warning("planning thread still busy; leaving it behind")
            self._worker = None
        with self._lock:
            self._other_images.clear()

    def _min_period(self) -> float:
        rate = self.config.max_planning_rate_hz
        return 1.0 / rate if rate > 0 else 0.0

    def _worker_crashed(self, exc: BaseException) -> None:
        self.stats.problem(ERROR, "model_errors", f"planning thread: {exc!r}")
        self.report()

    def _plan_frame(self, frame: Frame) -> None:
        self._handler.on_frame(frame, self.get_clock().now().nanoseconds * 1e-9)

    # ------------------------------------------------------------ inputs
    def _subscribe(self) -> None:
        cfg = self.config
        camera_qos = qos.CAMERA_QOS[cfg.camera_qos]
        for index, (msg_type, topic) in enumerate(camera_topics(cfg)):
            self._subscriptions_io.append(self.create_subscription(
                msg_type, topic, lambda msg, i=index: self._image_callback(i, msg),
                camera_qos, callback_group=self._inputs))
        for msg_type, topic, callback, profile in (
                (Odometry, ODOMETRY_TOPIC, self._odometry_callback, qos.ODOMETRY_QOS),
                (String, COMMAND_TOPIC, self._command_callback, qos.COMMAND_QOS),
                (String, QUESTION_TOPIC, self._question_callback, qos.COMMAND_QOS)):
            self._subscriptions_io.append(self.create_subscription(
                msg_type, topic, callback, profile, callback_group=self._inputs))

    @guarded
    def _image_callback(self, camera: int, msg) -> None:
        self.stats.count("frames_received")
        try:
            rgb = image_to_rgb(msg) if isinstance(msg, Image) else compressed_to_rgb(msg)
        except BadInput as exc:
            self._bad_input(exc)
            return
        stamp = _stamp_s(msg.header.stamp)
        if camera > 0:
            with self._lock:
                self._other_images[camera] = (rgb, stamp)
            return
        images = [rgb]
        max_age = self.config.max_input_age_s
        for other in range(1, len(self.config.cameras)):
            with self._lock:
                entry = self._other_images.get(other)
            if entry is None or (max_age > 0 and abs(entry[1] - stamp) > max_age):
                self._bad_input(BadInput("camera_missing", f"no image from camera "
                                         f"{self.config.cameras[other]!r} within "
                                         f"{max_age:g} s of frame {stamp:.3f}"))
                return
            images.append(entry[0])
        replaced = self._queue.put_frame(Frame(tuple(images), msg.header, stamp,
                                               time.monotonic()))
        if replaced is not None:
            self.stats.count("dropped_frames")

    @guarded
    def _odometry_callback(self, msg: Odometry) -> None:
        try:
            self._odometry.update(sample_from_msg(msg))
        except BadInput as exc:
            self._bad_input(exc)

    @guarded
    def _command_callback(self, msg: String) -> None:
        command = msg.data.strip().lower()
        if command in COMMANDS:
            self._command = command
            return
        self._command = self.config.default_command
        self._bad_input(BadInput("command_unknown", f"unknown command {msg.data!r} (expected "
                                 f"one of {', '.join(COMMANDS)}); using "
                                 f"{self._command!r}"))

    @guarded
    def _question_callback(self, msg: String) -> None:
        if "qa" not in self.config.tasks:
            self._bad_input(BadInput("question_ignored", "the qa task is disabled (parameter "
                                                         "tasks)"))
            return
        if not msg.data.strip():
            self._bad_input(BadInput("question_empty", "empty question"))
            return
        if self._queue.put_question(msg.data.strip()) is not None:
            self.stats.count("questions_dropped")

    # ------------------------------------------------------------ parameters
    def _state_label(self) -> str:
        return self._state_machine.current_state[1]

    def _validate_parameters(self, changes: list) -> SetParametersResult:
        """Accept a change only if it applies whole: validated, and re-warmed if it must be."""
        values = dict(self._values)
        values.update({p.name: p.value for p in changes})
        try:
            cfg = params.node_config(values)
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        changed = params.groups_changed(self._values, values)
        frozen = changed.get("load", []) + changed.get("io", [])
        state = self._state_label()
        if frozen and state != "unconfigured":
            return SetParametersResult(successful=False, reason=(
                f"{', '.join(frozen)} can only change while the node is unconfigured (it is "
                f"{state}): deactivate and clean up, set it, then configure again"))
        planner = None
        if "decode" in changed and self._planner is not None:
            try:
                planner = self._planner.reconfigure(cfg.decode, backend=cfg.backend,
                                                    plan_decode=cfg.plan_decode)
                planner.warmup()
            except Exception as exc:  # noqa: BLE001 - rejected, the old planner stays
                return SetParametersResult(successful=False, reason=(
                    f"{', '.join(changed['decode'])}: the planner could not be rebuilt "
                    f"({type(exc).__name__}: {exc}); keeping {self.config.decode}, backend "
                    f"{self.config.backend}"))
        self._staged = (values, cfg, planner)
        return SetParametersResult(successful=True)

    def _apply_parameters(self, changes: list) -> None:
        if self._staged is None:
            return
        values, cfg, planner = self._staged
        self._staged = None
        self._values, self.config = values, cfg
        if planner is not None:
            self._planner = planner
        self._diag_timer.timer_period_ns = int(cfg.diagnostics_period_s * 1e9)
        self.get_logger().info("parameters set: " + ", ".join(
            f"{p.name}={p.value!r}" for p in changes))


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(args: list[str] | None = None) -> int:
    """Run the node until SIGINT/SIGTERM or shutdown; 0 on a clean exit, 2 on bad parameters.

    rclpy's own signal handler is off: it shuts the context down under a node that is still
    being built or configured (a traceback from the next rcl call). Here a signal raises
    KeyboardInterrupt in the main thread wherever it is (building, loading the model,
    spinning), and the `finally` below stops the worker and tears everything down in order.
    """
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: list[str] | None) -> int:
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except RuntimeError as exc:   # rclpy's RCLError: malformed --ros-args
        print(f"planner_node: {exc}", file=sys.stderr)
        return 2
    node = executor = None
    try:
        try:
            node = PlannerNode()
        except (InvalidParameterValueException, InvalidParameterTypeException,
                ValueError) as exc:
            print(f"planner_node: invalid parameter: {exc}", file=sys.stderr)
            return 2
        executor = MultiThreadedExecutor(num_threads=3)
        executor.add_node(node)
        if node.config.autostart and not node.start():
            node.get_logger().error("autostart failed; waiting in state "
                                    f"{node._state_label()} for lifecycle transitions")
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.2)   # returns often enough to take a signal
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut teardown
        if node is not None:
            node.close()
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
