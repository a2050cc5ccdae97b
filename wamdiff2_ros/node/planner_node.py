"""The `planner_node` executable: the `wamdiff2_planner` lifecycle node.

Receiving callbacks (a mutually exclusive callback group per topic, multi-threaded
executor) only convert messages and put the newest frame in a one-frame slot; a worker
thread plans. Subscriptions change only on the thread that spins (spin_thread.py).
configure = load the model and warm it up; activate = subscribe and start planning. With
the `autostart` parameter (default true) the node configures and activates itself.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType, JumpThreshold
from rclpy.duration import Duration
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from wamdiff2_ros.node import dds, outputs, params, qos
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.diagnostics import ERROR, WARN, NodeStats, diagnostic_array
from wamdiff2_ros.node.fallback import LastPlan
from wamdiff2_ros.node.health import InputHealth
from wamdiff2_ros.node.inputs import CAMERA, ODOMETRY, InputCallbacks, NodeLinks
from wamdiff2_ros.node.logs import ThrottledLog
from wamdiff2_ros.node.odometry import OdometryTracker
from wamdiff2_ros.node.overrides import check_override_types
from wamdiff2_ros.node.planning import Outputs, PlanningHandler
from wamdiff2_ros.node.spin_thread import SpinThreadCalls
from wamdiff2_ros.node.topics import (ANSWER_TOPIC, COMMAND_TOPIC, DETECTIONS_TOPIC,
                                      DIAGNOSTICS_TOPIC, MARKERS_TOPIC, ODOMETRY_TOPIC, PATH_TOPIC,
                                      QUESTION_TOPIC, STATS_TOPIC, STATUS_TOPIC,
                                      camera_topics)
from wamdiff2_ros.node.worker import Frame, PlanningWorker, WorkQueue

NODE_NAME = "wamdiff2_planner"
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
QOS_REFRESH_S = 1.0              # how often `auto` subscriptions re-read the publishers


class PlannerNode(LifecycleNode):
    """Cameras, odometry, commands and questions in; Path, markers, answers, per-frame stats,
    diagnostics out."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self._values = params.declare(self)             # raises on out-of-range overrides
        self.config = params.node_config(self._values)  # raises ValueError with the reason
        self.finished = threading.Event()   # set by the shutdown transition: main() returns
        self._planner = None                 # wamdiff2_core.planner.Planner once configured
        self._staged: tuple[dict, params.NodeConfig, Any] | None = None
        self._subscriptions_io: list[qos.AdaptiveSubscription] = []
        self._io_lock = threading.Lock()          # the subscriptions list vs. the QoS timer
        # Subscriptions are created and destroyed on the thread that spins (spin_thread.py):
        # main() binds it; the guard condition wakes its spin for a call from elsewhere.
        self._spin_wake = self.create_guard_condition(
            lambda: None, callback_group=MutuallyExclusiveCallbackGroup())
        self.spin_calls = SpinThreadCalls(self._spin_wake.trigger)
        self._qos_refresh_queued = False
        self._worker: PlanningWorker | None = None
        self._queue = WorkQueue()
        self.stats = NodeStats()
        self.health = InputHealth()
        self._log = ThrottledLog(self.get_logger(), lambda: self.config.log_throttle_s)
        self._odometry = OdometryTracker()
        self._last_plan = LastPlan()

        # Diagnostics report in every state; results only while active (lifecycle publishers).
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        pubs = {name: self.create_lifecycle_publisher(msg_type, topic, qos.OUTPUT_QOS)
                for name, msg_type, topic in (
                    ("path", Path, PATH_TOPIC), ("markers", MarkerArray, MARKERS_TOPIC),
                    ("answer", String, ANSWER_TOPIC), ("status", DiagnosticArray, STATUS_TOPIC),
                    ("stats", DiagnosticArray, STATS_TOPIC))}
        if outputs.HAVE_VISION_MSGS:
            pubs["detections"] = self.create_lifecycle_publisher(
                outputs.Detection2DArray, DETECTIONS_TOPIC, qos.OUTPUT_QOS)
        self._pubs = pubs
        self._handler = PlanningHandler(
            lambda: self._planner, lambda: self.config, lambda: self._inputs.command,
            self._odometry, self.stats,
            Outputs(pubs["path"].publish, pubs["markers"].publish, pubs["answer"].publish,
                    pubs["detections"].publish if "detections" in pubs else None,
                    pubs["status"].publish, self.report, pubs["stats"].publish),
            self._log, self._last_plan, self.status_name)
        self._inputs = InputCallbacks(NodeLinks(
            config=lambda: self.config, queue=lambda: self._queue, now_s=self._now_s,
            count_tokens=self._count_tokens, bad_input=self._bad_input,
            on_error=self._callback_error, answer_refused=self._answer_refused,
            count=self.stats.count), self._odometry, self.health)
        # Steady-clock timers: with use_sim_time they run before the first /clock and at any
        # replay rate (a node's health is reported in real time).
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._diag_timer = self.create_timer(self.config.diagnostics_period_s,
                                             self._diagnostics_callback, clock=steady)
        self._qos_timer = self.create_timer(QOS_REFRESH_S, self._refresh_qos_callback,
                                            callback_group=MutuallyExclusiveCallbackGroup(),
                                            clock=steady)
        self._jump = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=Duration(seconds=-1.0),
                          on_clock_change=True), post_callback=self._time_jumped)
        self.add_on_set_parameters_callback(self._validate_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)
        self._set_state("unconfigured")

    # ------------------------------------------------------------ diagnostics
    def status_name(self) -> str:
        """The DiagnosticStatus name: the node's full name (namespaces keep vehicles apart)."""
        return f"{self.get_fully_qualified_name()}: planner"

    def _set_state(self, state: str) -> None:
        self.stats.state = state

    def _conditions(self) -> list:
        """Standing problems: silent inputs while active, missing pieces."""
        cfg, out = self.config, []
        if self.stats.state == "active":
            inputs = {f"{CAMERA}{i}": s.topic_name
                      for i, s in enumerate(self._subscriptions_io[:len(cfg.cameras)])}
            if cfg.max_odometry_age_s > 0 and len(self._subscriptions_io) > len(cfg.cameras):
                inputs[ODOMETRY] = self._subscriptions_io[len(cfg.cameras)].topic_name
            out += self.health.silent(inputs, cfg.input_timeout_s)
        if "detection" in cfg.tasks and not outputs.HAVE_VISION_MSGS:
            out.append((WARN, "detection: vision_msgs is not installed, "
                              "~/output/detections is not published (markers only)"))
        return out

    def report(self, level: bytes | None = None, message: str | None = None) -> None:
        """Publish the node's DiagnosticArray now (the worst recent problem unless given)."""
        device = self.config.device
        msg = diagnostic_array(self.stats, self.status_name(),
                               f"wamdiff2 {self.config.checkpoint or 'bundled'} on {device}",
                               self.get_clock().now().to_msg(), level, message,
                               self._conditions())
        try:
            self._diag_pub.publish(msg)
        except Exception:  # noqa: BLE001 - the context may be shutting down
            pass

    def _diagnostics_callback(self) -> None:
        self.report()

    def _bad_input(self, exc: BadInput, level: bytes = WARN) -> None:
        self.stats.problem(level, exc.kind, str(exc), bad_input=True)
        self._log.warn(exc.kind, f"dropped input: {exc}")
        self.report(level, f"{exc.kind}: {exc}")

    def _callback_error(self, text: str) -> None:
        self.stats.problem(ERROR, "callback_errors", text)
        self._log.error("callback_errors", text)
        self.report()

    def _answer_refused(self) -> None:
        self._pubs["answer"].publish(String(data=""))

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _count_tokens(self):
        planner = self._planner
        return planner.count_tokens if planner is not None else None

    def _time_jumped(self, jump) -> None:
        """ROS time went back (a simulator reset, a looping /clock) or changed source: the
        odometry history and the last plan belong to the old timeline."""
        self._odometry.reset()
        self._last_plan.forget()
        self._log.warn("time_jump", f"the node clock jumped ({jump.clock_change}, "
                                    f"{jump.delta.nanoseconds * 1e-9:+.3f} s): odometry history "
                                    "and last plan cleared")

    # ------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self.config
        self._set_state("configuring")
        plan = f"; planning: {cfg.plan_decode}" if cfg.plan_decode else ""
        self.get_logger().info(f"loading {cfg.checkpoint or 'the bundled model'} on "
                               f"{cfg.device} ({cfg.decode}{plan})")
        try:
            # torch loads here, not at import: bad parameters and Ctrl-C during start-up are
            # handled by main() before the slow import; so is a bad checkpoint directory.
            from wamdiff2_core.model.checkpoint import check_source
            check_source(cfg.checkpoint)
            from wamdiff2_core.planner import Planner

            planner = Planner.from_pretrained(cfg.checkpoint, decode=cfg.decode,
                                              device=cfg.device, dtype=cfg.dtype,
                                              backend=cfg.backend,
                                              plan_decode=cfg.plan_decode, fields=cfg.fields,
                                              plan_max_speed=cfg.plan_max_speed)
            self.get_logger().info(planner.model.describe())
            self.get_logger().info(f"decoding with {planner.decode_summary()}")
            stats = planner.warmup()
        except Exception as exc:  # noqa: BLE001 - a failed configure leaves us unconfigured
            self._set_state("unconfigured")
            self.stats.configure_error = f"{type(exc).__name__}: {exc}"
            self.stats.problem(ERROR, "configure_failed", f"{type(exc).__name__}: {exc}")
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            self.report()
            return FAILURE
        self._planner = planner
        self.stats.configure_error = None
        self.get_logger().info(f"warmed up ({stats.total_ms:.0f} ms)")
        if "detection" in cfg.tasks and not outputs.HAVE_VISION_MSGS:
            self.get_logger().warning("tasks include detection but vision_msgs is not "
                                      "installed: ~/output/detections is not published")
        self._set_state("inactive")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)            # enable the publishers first
        self._queue = WorkQueue()
        self._worker = PlanningWorker(self._queue, self._plan_frame, self._handler.on_question,
                                      self._min_period, self._worker_crashed)
        self._worker.start()
        self._subscribe()
        self.health.start()
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
        self._odometry.reset()
        self._last_plan.forget()
        self._set_state("unconfigured")
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_io()
        self._planner = None
        self._set_state("finalized")
        self.report()
        self.finished.set()                   # main() ends the process
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
        self.health.stop()
        self.spin_calls.call(self._unsubscribe)
        if self._worker is not None:
            if not self._worker.stop(timeout=60.0):
                self.get_logger().warning("planning thread still busy; leaving it behind")
            self._worker = None
        self._inputs.clear()

    def _min_period(self) -> float:
        rate = self.config.max_planning_rate_hz
        return 1.0 / rate if rate > 0 else 0.0

    def _worker_crashed(self, exc: BaseException) -> None:
        self.stats.problem(ERROR, "model_errors", f"planning thread: {exc!r}")
        self.report()

    def _plan_frame(self, frame: Frame) -> None:
        self._handler.on_frame(frame, self._now_s())

    # ------------------------------------------------------------ inputs
    def _subscribe(self) -> None:
        """Cameras first (in order), then odometry, command, question. Each topic has a
        mutually exclusive callback group of its own: one topic's messages are handled one
        at a time, in the order they arrive (two odometry messages converted on two executor
        threads at once could finish out of order, and the later would be refused as
        `odometry_out_of_order`), while different topics still run side by side."""
        cfg, inputs = self.config, self._inputs
        topics = [(msg_type, topic, lambda msg, i=index: inputs.image(i, msg),
                   qos.camera_qos(cfg.camera_qos))
                  for index, (msg_type, topic) in enumerate(camera_topics(cfg))]
        topics += [(Odometry, ODOMETRY_TOPIC, inputs.odometry, qos.odometry_qos(cfg.odometry_qos)),
                   (String, COMMAND_TOPIC, inputs.command_msg, qos.COMMAND_QOS),
                   (String, QUESTION_TOPIC, inputs.question, qos.QUESTION_QOS)]

        def create() -> None:
            with self._io_lock:
                for msg_type, topic, callback, topic_qos in topics:
                    self._subscriptions_io.append(qos.AdaptiveSubscription(
                        self, msg_type, topic, callback, topic_qos,
                        MutuallyExclusiveCallbackGroup(), on_change=self._qos_changed,
                        on_incompatible=self._qos_incompatible, on_lost=self._messages_lost))

        self.spin_calls.call(create)

    def _unsubscribe(self) -> None:
        with self._io_lock:
            for sub in self._subscriptions_io:
                sub.destroy()
            self._subscriptions_io = []

    def _refresh_qos_callback(self) -> None:
        """The QoS timer: re-subscribe where the publishers call for it, on the spinning
        thread (queued once: a refresh still waiting there is not queued again)."""
        with self._io_lock:
            if self._qos_refresh_queued:
                return
            self._qos_refresh_queued = True
        self.spin_calls.call(self._refresh_qos, wait=False)

    def _refresh_qos(self) -> None:
        with self._io_lock:
            self._qos_refresh_queued = False
            for sub in self._subscriptions_io:
                try:
                    sub.refresh()
                except Exception as exc:  # noqa: BLE001 - a graph query during teardown
                    self._log.debug(f"QoS refresh of {sub.topic_name} failed: {exc!r}")

    def _qos_changed(self, topic: str, profile: str) -> None:
        self.get_logger().info(f"subscribed to {topic} ({profile})")

    def _qos_incompatible(self, topic: str, text: str) -> None:
        self._bad_input(BadInput("qos_incompatible", f"{topic}: {text}"))

    def _messages_lost(self, topic: str, count: int) -> None:
        if count > 0:
            self.stats.count("messages_lost", count)
            self._log.warn("messages_lost", f"DDS lost {count} message(s) on {topic}")

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
                                                    plan_decode=cfg.plan_decode,
                                                    plan_max_speed=cfg.plan_max_speed)
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


# CPython's switch interval while the node runs. The planning thread releases the GIL at
# every torch call (hundreds per plan) and must take it back each time; a thread that holds
# it in Python meanwhile (the executor's threads building wait sets and running callbacks)
# keeps it for up to the interval. At the default 5 ms, 7 of 20 runs of the overload test's
# node (30 Hz camera) had a plan of 3.5-8.1 s, mostly the first after activation (the rest
# ~0.5 s); at 0.5 ms none of 20 runs had one over 1.04 s. docs/ros.md, "Threads".
GIL_SWITCH_INTERVAL_S = 0.0005


def main(args: list[str] | None = None) -> int:
    """Run the node until SIGINT/SIGTERM or shutdown; 0 on a clean exit, 2 on bad parameters.

    rclpy's own signal handler is off: it shuts the context down under a node that is still
    being built or configured (a traceback from the next rcl call). Here a signal raises
    KeyboardInterrupt in the main thread wherever it is (building, loading the model,
    spinning), and the `finally` below stops the worker and tears everything down in order.
    The GIL switch interval is ``GIL_SWITCH_INTERVAL_S`` while the node runs (restored after,
    as the signal handlers are, for a caller that runs the node in its own process).
    """
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous_interval = sys.getswitchinterval()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        return _run(args)
    finally:
        sys.setswitchinterval(previous_interval)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: list[str] | None) -> int:
    # No progress bars in a node's log (transformers' "Loading weights" bar reads this when
    # it is imported, at configure): the log says "loading ..." and "warmed up" instead.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        check_override_types(sys.argv if args is None else args)
    except ValueError as exc:
        print(f"planner_node: invalid parameter: {exc}", file=sys.stderr)
        return 2
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
        environ = dict(os.environ)
        dds_warning = dds.defaults_warning(environ)
        if dds_warning:
            node.get_logger().warning(dds_warning)
        else:
            node.get_logger().info(f"DDS: {dds.describe(environ)}")
        executor = MultiThreadedExecutor(num_threads=3)
        executor.add_node(node)
        node.spin_calls.bind()            # subscriptions change on this thread (spin_thread.py)
        if node.config.autostart and not node.start():
            node.get_logger().error("autostart failed; waiting in state "
                                    f"{node._state_label()} for lifecycle transitions")
        while rclpy.ok() and not node.finished.is_set():
            executor.spin_once(timeout_sec=0.2)   # returns often enough to take a signal
            node.spin_calls.run_pending()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut teardown
        if node is not None:
            node.spin_calls.unbind()      # spinning has stopped: what is queued runs now
            node.close()
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
