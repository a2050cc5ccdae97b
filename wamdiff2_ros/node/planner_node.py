"""The `planner_node` executable: the `wamdiff2_planner` lifecycle node.

The rclpy shape of ros2/demos' lifecycle talker: one node spun by the stock single-threaded
executor. Its receiving callbacks convert a message and put it in the inbox (`worker.py`);
the model lane (`scheduler.py`) takes each job by its policy (planning first), turns it into
one outcome (`planning.py`) and publishes that once (`publishing.py`). Parameter changes that
need a new planner are built and warmed off the callbacks (`rebuild.py`); a steady-clock
watchdog publishes a fallback Path when Paths stop while frames arrive. configure = load the
model and warm it up; activate = subscribe and start the lane. With the `autostart`
parameter (default true) the node configures and activates itself. docs/design.md draws the
path from camera to Path.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, KeyValue
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType, JumpThreshold
from rclpy.duration import Duration
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future
from std_msgs.msg import String

from wamdiff2_core.process_exit import run_main
from wamdiff2_ros.node import dds, outputs, params, qos
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.diagnostics import ERROR, WARN, NodeStats, Reporter, diagnostic_array
from wamdiff2_ros.node.health import InputHealth
from wamdiff2_ros.node.inputs import (CAMERA, ODOMETRY, accept_odometry, camera_image,
                                      guarded)
from wamdiff2_ros.node.limits import check_command, check_question
from wamdiff2_ros.node.logs import ThrottledLog
from wamdiff2_ros.node.odometry import OdometryTracker
from wamdiff2_ros.node.overrides import check_override_types
from wamdiff2_ros.node.param_changes import ParameterChanges
from wamdiff2_ros.node.planning import Planning
from wamdiff2_ros.node.publishing import NodeOutputs
from wamdiff2_ros.node.rebuild import PlannerBuilder
from wamdiff2_ros.node.scheduler import Scheduler
from wamdiff2_ros.node.signal_wake import SignalWake
from wamdiff2_ros.node.topics import (COMMAND_TOPIC, DIAGNOSTICS_TOPIC, ODOMETRY_TOPIC,
                                      QUESTION_TOPIC, camera_topics)
from wamdiff2_ros.node.worker import Inbox, Settings

NODE_NAME = "wamdiff2_planner"
CAMERA_QOS_CHECK_S = 1.0       # camera_qos auto: how often the camera publishers' QoS is read
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class PlannerNode(ParameterChanges, LifecycleNode):
    """Cameras, odometry, commands and questions in; Path, markers, answers, per-frame stats,
    diagnostics out."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self._values = params.declare(self)             # raises on out-of-range overrides
        self.config = params.node_config(self._values)  # raises ValueError with the reason
        self.finished = Future()       # done by the shutdown transition: main() returns
        self._planner = None           # wamdiff2_core.planner.Planner once configured
        self._command = self.config.default_command
        self._staged: tuple[dict, params.NodeConfig, dict] | None = None
        self.stats, self.health = NodeStats(), InputHealth()
        self._log = ThrottledLog(self.get_logger(), lambda: self.config.log_throttle_s)
        self._odometry = OdometryTracker()
        self._inbox = Inbox()
        self._scheduler: Scheduler | None = None
        self._inputs: list = []                          # the active subscriptions
        self._input_topics: dict[str, str] = {}          # InputHealth name -> topic
        self.dds = dds.describe(os.environ)

        # Diagnostics report in every state; results only while active (lifecycle publishers).
        diagnostics = self.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        self._reporter = Reporter(diagnostics, self.stats, self._log, self._diagnostic_array)
        self._outputs = NodeOutputs(self, self.stats, self._reporter, self._odometry,
                                    self.status_name())
        self._planning = Planning(self._odometry, self._now_s, self._log)
        self._builder = PlannerBuilder(self._plan_busy, self._rebuilt, self._rebuild_failed)
        # Steady-clock timer: with use_sim_time it runs before the first /clock and at any
        # replay rate (a node's health is reported in real time).
        self._diag_timer = self.create_timer(self.config.diagnostics_period_s,
                                             self._reporter.report,
                                             clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._watchdog = self.create_timer(self._watchdog_period(self.config), self._watch,
                                           clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._jump = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=Duration(seconds=-1.0),
                          on_clock_change=True), post_callback=self._time_jumped)
        self.add_on_set_parameters_callback(self._validate_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)

    # ------------------------------------------------------------ diagnostics
    def status_name(self) -> str:
        """The DiagnosticStatus name: the node's full name (namespaces keep vehicles apart)."""
        return f"{self.get_fully_qualified_name()}: planner"

    def _conditions(self) -> list:
        """Standing problems: silent inputs while active, missing pieces."""
        cfg, out = self.config, []
        if self.stats.state == "active":
            out += self.health.silent(self._input_topics, cfg.input_timeout_s,
                                      cfg.input_timeout_error_s)
        if "detection" in cfg.tasks and not outputs.HAVE_VISION_MSGS:
            out.append((WARN, "detection: vision_msgs is not installed, "
                              "~/output/detections is not published (markers only)"))
        return out

    def _diagnostic_array(self, level: bytes | None, message: str | None) -> DiagnosticArray:
        msg = diagnostic_array(self.stats, self.status_name(),
                               f"wamdiff2 {self.config.checkpoint or 'bundled'} on "
                               f"{self.config.device}", self.get_clock().now().to_msg(),
                               level, message, self._conditions())
        planner = self._planner
        values = {"dds": self.dds}
        if planner is not None:            # the resolved settings: what it decodes with
            values["decode"] = planner.decode.summary()
            values["plan_decode"] = planner.plan_decode.summary()
        msg.status[0].values += [KeyValue(key=k, value=v) for k, v in values.items()]
        return msg

    def _callback_error(self, text: str) -> None:
        self._reporter.problem(ERROR, "callback_errors", text)

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _time_jumped(self, jump) -> None:
        """ROS time went back (a simulator reset, a looping /clock) or changed source: the
        odometry history and the last plan belong to the old timeline."""
        self._odometry.reset()
        self._planning.last_plan.forget()
        self._log.warn("time_jump", f"the node clock jumped ({jump.clock_change}, "
                                    f"{jump.delta.nanoseconds * 1e-9:+.3f} s): odometry history "
                                    "and last plan cleared")

    # ------------------------------------------------------------ receiving callbacks
    def _settings(self) -> Settings:
        return Settings(self.config, self._planner, self._command)

    @guarded
    def _image_callback(self, msg, camera: int) -> None:
        """A frame of camera `camera` (0 triggers planning)."""
        self.stats.count("frames_received")
        self.health.seen(f"{CAMERA}{camera}")
        try:
            image = camera_image(msg, self.config, self._now_s())
        except BadInput as exc:
            self._reporter.problem(WARN, exc.kind, str(exc), bad_input=True)
            return
        if self._inbox.put_image(camera, image, self._settings()):
            self.stats.count("dropped_frames")

    @guarded
    def _odometry_callback(self, msg: Odometry) -> None:
        self.stats.count("odometry_received")
        self.health.seen(ODOMETRY)
        try:
            accept_odometry(msg, self.config, self._now_s(), self._odometry)
        except BadInput as exc:
            self._reporter.problem(WARN, exc.kind, str(exc), bad_input=True)

    @guarded
    def _command_callback(self, msg: String) -> None:
        cfg = self.config
        try:
            self._command = check_command(msg.data, cfg.max_command_chars, cfg.max_echo_chars)
        except BadInput as exc:
            self._command = cfg.default_command
            self._reporter.problem(WARN, exc.kind, f"{exc}; using {self._command!r}",
                                   bad_input=True)

    @guarded
    def _question_callback(self, msg: String) -> None:
        cfg, planner = self.config, self._planner
        try:
            if "qa" not in cfg.tasks:
                raise BadInput("question_ignored", "the qa task is disabled (parameter tasks)")
            question = check_question(msg.data, cfg.max_question_chars,
                                      cfg.max_question_tokens,
                                      planner.count_tokens if planner is not None else None)
        except BadInput as exc:
            self.stats.count("questions_refused")
            self._reporter.problem(WARN, exc.kind, str(exc), bad_input=True)
            self._outputs.publish_refused_answer()
            return
        dropped = self._inbox.put_question(question, self._settings())
        if dropped is not None and self._scheduler is not None:
            self._scheduler.refuse_dropped(dropped)

    def _worker_crashed(self, exc: BaseException) -> None:
        self._reporter.problem(ERROR, "model_errors", f"planning thread: {exc!r}")

    @staticmethod
    def _watchdog_period(cfg: params.NodeConfig) -> float:
        """A quarter of max_path_gap_s (a gap is seen within 1.25 of it); 1 s when off."""
        return cfg.max_path_gap_s / 4 if cfg.max_path_gap_s > 0 else 1.0

    def _watch(self) -> None:
        """The watchdog timer (steady clock): see Scheduler.watchdog."""
        if self._scheduler is not None and self.stats.state == "active":
            self._scheduler.watchdog(self.config.max_path_gap_s)

    # ------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self.config
        self.stats.state = "configuring"
        self.get_logger().info(f"loading {cfg.checkpoint or 'the bundled model'} on "
                               f"{cfg.device}")
        try:
            # torch loads here, not at import: bad parameters and Ctrl-C during start-up are
            # handled by main() before the slow import; so is a bad checkpoint directory.
            from wamdiff2_core.model.checkpoint import check_source
            check_source(cfg.checkpoint)
            from wamdiff2_core.planner import Planner

            planner = Planner.from_pretrained(cfg.checkpoint, cfg.planner_config,
                                              device=cfg.device, dtype=cfg.dtype,
                                              fields=cfg.fields)
            self.get_logger().info(planner.model.describe())
            if planner.cameras != cfg.cameras:
                raise ValueError(f"parameter cameras {list(cfg.cameras)} are not the cameras "
                                 f"the model was trained with: set cameras to "
                                 f"{list(planner.cameras)} (its order)")
            self.get_logger().info(f"decoding with {planner.decode_summary()}")
            if planner.picker is not None:
                self.get_logger().info(f"planning with {planner.picker.describe()}")
            # here, not on the model's thread: a warm-up there made every later plan on that
            # thread several times slower on a CPU (docs/history.md, 2026-12-06)
            stats = planner.warmup()
        except Exception as exc:  # noqa: BLE001 - a failed configure leaves us unconfigured
            self.stats.state = "unconfigured"
            self.stats.configure_error = f"{type(exc).__name__}: {exc}"
            self.stats.problem(ERROR, "configure_failed", f"{type(exc).__name__}: {exc}")
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            self._reporter.report()
            return FAILURE
        self._planner = planner
        self.stats.configure_error = None
        self.get_logger().info(f"warmed up ({stats.total_ms:.0f} ms)")
        if "detection" in cfg.tasks and not outputs.HAVE_VISION_MSGS:
            self.get_logger().warning("tasks include detection but vision_msgs is not "
                                      "installed: ~/output/detections is not published")
        self.stats.state = "inactive"
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)            # enable the publishers first
        self._subscribe()
        self._inbox.clear()
        self._scheduler = Scheduler(self._inbox, self._planning, self._outputs,
                                    self._worker_crashed)
        self._scheduler.start()
        self.health.start()
        self.stats.state = "active"
        self.get_logger().info("ready: planning on " + ", ".join(self._input_topics.values()))
        self._reporter.report()
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_io()
        self.stats.state = "inactive"
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._planner = None
        self._odometry.reset()
        self._planning.last_plan.forget()
        self.stats.state = "unconfigured"
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_io()
        self._planner = None
        self.stats.state = "finalized"
        self._reporter.report()
        self.finished.set_result(True)        # main() stops spinning once this call returns
        return super().on_shutdown(state)

    def start(self) -> bool:
        """configure + activate (the `autostart` path); False if a transition failed."""
        if self.trigger_configure() != SUCCESS:
            return False
        return self.trigger_activate() == SUCCESS

    def close(self) -> None:
        """Stop planning and release the model; safe to call more than once."""
        self._stop_io()
        if not self._builder.close():
            self.get_logger().warning("the planner rebuild is still warming up after 60 s; "
                                      "leaving it behind")
        self._planner = None

    def _stop_io(self) -> None:
        self.health.stop()
        for subscription in self._inputs:
            self.destroy_subscription(subscription)
        self._inputs, self._input_topics = [], {}
        if self._scheduler is not None:
            if not self._scheduler.stop(timeout=60.0):
                self.get_logger().warning("the model's thread is still in a forward pass "
                                          "after 60 s; leaving it behind")
            self._scheduler = None

    # ------------------------------------------------------------ inputs
    def _subscribe(self) -> None:
        """Cameras first (in order), then odometry, commands, questions (QoS: qos.py)."""
        cfg = self.config
        self._cameras = [self._subscribe_camera(msg_type, topic, index)
                         for index, (msg_type, topic) in enumerate(camera_topics(cfg))]
        if cfg.camera_qos == qos.AUTO and not dds.package_profile(os.environ) and \
                getattr(self, "_camera_qos_timer", None) is None:
            # rclpy has no graph-change callback: a cheap look at the graph's cache each
            # second follows drivers that come, go or change QoS (steady: sim time aside)
            self._camera_qos_timer = self.create_timer(
                CAMERA_QOS_CHECK_S, self._check_camera_qos,
                clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._input(Odometry, ODOMETRY_TOPIC, self._odometry_callback,
                    qos.input_qos(cfg.odometry_qos, qos.ODOMETRY_DEPTH),
                    ODOMETRY if cfg.max_odometry_age_s > 0 else None)
        self._input(String, COMMAND_TOPIC, self._command_callback, qos.COMMAND_ANY_QOS)
        # a volatile publisher is the usual case here, not an incompatibility to report
        self._input(String, COMMAND_TOPIC, self._command_callback, qos.COMMAND_LATCHED_QOS,
                    report_incompatible=False)
        self._input(String, QUESTION_TOPIC, self._question_callback, qos.QUESTION_QOS)

    def _camera_profile(self, topic: str):
        """(profile, why) of camera `topic` now: `camera_qos`, `auto` resolved against the
        QoS its publishers offer (qos.camera_choice)."""
        publishers = self.get_publishers_info_by_topic(self.resolve_topic_name(topic))
        choice, why = qos.camera_choice(self.config.camera_qos,
                                        [info.qos_profile for info in publishers],
                                        dds.package_profile(os.environ))
        return qos.input_qos(choice, qos.CAMERA_DEPTH), why

    def _subscribe_camera(self, msg_type, topic: str, index: int) -> tuple:
        profile, why = self._camera_profile(topic)
        # under auto an incompatible driver is a moment's state: the next check follows it
        subscription = self._input(msg_type, topic,
                                   lambda msg, i=index: self._image_callback(msg, i), profile,
                                   f"{CAMERA}{index}", why=why,
                                   report_incompatible=self.config.camera_qos != qos.AUTO)
        return subscription, msg_type, topic, index

    def _check_camera_qos(self) -> None:
        """camera_qos auto: a camera whose publishers now call for the other reliability is
        subscribed again with it (a frame in flight may be lost then, once)."""
        for n, (subscription, msg_type, topic, index) in enumerate(self._cameras):
            if subscription not in self._inputs:        # deactivated since
                continue
            profile, _ = self._camera_profile(topic)
            if profile.reliability != subscription.qos_profile.reliability:
                self._inputs.remove(subscription)
                self.destroy_subscription(subscription)
                self._cameras[n] = self._subscribe_camera(msg_type, topic, index)

    def _input(self, msg_type, topic: str, callback, profile, health: str | None = None,
               report_incompatible: bool = True, why: str = ""):
        resolved = self.resolve_topic_name(topic)
        events = SubscriptionEventCallbacks(
            incompatible_qos=(lambda status: self._reporter.problem(
                WARN, "qos_incompatible", f"{resolved}: a publisher's QoS is incompatible "
                f"with this subscription ({qos.describe(profile)}; {status.total_count} in "
                "all)", bad_input=True)) if report_incompatible else None,
            message_lost=lambda status: self._messages_lost(resolved,
                                                            int(status.total_count_change)),
            use_default_callbacks=False)
        subscription = self.create_subscription(msg_type, topic, callback, profile,
                                                event_callbacks=events)
        self._inputs.append(subscription)
        if health is not None:
            self._input_topics[health] = resolved
        self.get_logger().info(f"subscribed to {resolved} ({qos.describe(profile)}"
                               f"{'; ' + why if why else ''})")
        return subscription

    def _messages_lost(self, topic: str, count: int) -> None:
        if count > 0:
            self.stats.count("messages_lost", count)
            self._log.warn("messages_lost", f"DDS lost {count} message(s) on {topic}")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(args: list[str] | None = None) -> int:
    """Run the node until SIGINT/SIGTERM or the shutdown transition; 0 on a clean exit, 2 on
    bad parameters.

    rclpy's own signal handler is off: it shuts the context down under a node that is still
    being built or configured (a traceback from the next rcl call). Here a signal raises
    KeyboardInterrupt in the main thread wherever it is (building, loading the model,
    spinning: `SignalWake` wakes the executor for it), and the `finally` below stops the
    worker and tears everything down in order.
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
    node = executor = wake = None
    try:
        try:
            node = PlannerNode()
        except (InvalidParameterValueException, InvalidParameterTypeException,
                ValueError) as exc:
            print(f"planner_node: invalid parameter: {exc}", file=sys.stderr)
            return 2
        warning = dds.defaults_warning(os.environ)
        if warning:
            node.get_logger().warning(warning)
        else:
            node.get_logger().info(f"DDS: {node.dds}")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        wake = SignalWake(executor.wake)
        if node.config.autostart and not node.start():
            node.get_logger().error("autostart failed; waiting in state "
                                    f"{node._state_machine.current_state[1]} for lifecycle "
                                    "transitions")
        executor.spin_until_future_complete(node.finished)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut teardown
        if wake is not None:
            wake.close()
        if node is not None:
            node.close()
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


def run() -> NoReturn:
    """The `planner_node` executable: `main`, then the process ends without module
    teardown once everything above is torn down (wamdiff2_core.process_exit)."""
    run_main(main)


if __name__ == "__main__":
    run()
