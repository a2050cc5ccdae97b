"""The worker side of the node: one frame or question in, messages out, never an exception.

`PlanningHandler` runs the planner on a `Frame` and publishes the Path, its status, markers,
detections and the frame's stats (`~/output/stats`: parsed or not, milliseconds, tokens,
forwards, which Path went out), or answers a question. Never silent: a frame that is planned
always yields a Path, the model's own or, when its answer fails (an exception,
`plan_timeout_s` passed, an answer that does not parse, odometry too old), the fallback
(`fallback.py`), with `~/output/status` and /diagnostics saying which and why. A failed
detection publishes an empty Detection2DArray, a failed or refused question an empty answer.
Every failure is counted in `NodeStats`, logged (throttled) and reported at once.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from std_msgs.msg import ColorRGBA, String
from visualization_msgs.msg import Marker

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.types import Observation, PromptTooLong
from wamdiff2_ros.node import outputs
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.diagnostics import ERROR, WARN, NodeStats
from wamdiff2_ros.node.fallback import MODEL, LastPlan, Plan, fallback_plan
from wamdiff2_ros.node.logs import ThrottledLog, clip
from wamdiff2_ros.node.odometry import EgoMotion, OdometryTracker
from wamdiff2_ros.node.params import NodeConfig
from wamdiff2_ros.node.worker import Frame


@dataclass(frozen=True)
class Outputs:
    """Where results go: publish callables (None where that output does not exist)."""

    path: Callable[[Any], None]
    markers: Callable[[Any], None]
    answer: Callable[[Any], None]
    detections: Callable[[Any], None] | None
    status: Callable[[Any], None]
    report: Callable[[bytes, str], None]      # publish a diagnostic now (level, message)
    stats: Callable[[Any], None] | None = None   # the frame's stats (DiagnosticArray)


@dataclass
class _PlanRecord:
    """What became of one frame's planning answer (its stats message's content)."""

    parsed: bool = False
    ms: float = 0.0
    stats: DecodeStats | None = None
    text: str = ""
    source: str = ""           # the published Path's: model | last_plan | stop ("": none)
    failure: str = ""          # the NodeStats counter of what failed ("" for the model's plan)
    message: str = "ok"


def _status_marker(frame_id: str, stamp, text: str, ok: bool) -> Marker:
    colour = ColorRGBA(r=0.1, g=0.9, b=0.3, a=1.0) if ok else ColorRGBA(r=1.0, g=0.2,
                                                                         b=0.2, a=1.0)
    m = Marker(ns="wamdiff2/status", id=0, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD,
               color=colour, text=text)
    m.header.frame_id, m.header.stamp = frame_id, stamp
    m.pose.position.z, m.pose.orientation.w, m.scale.z = 2.0, 1.0, 0.5
    return m


class Deadline:
    """Runs `on_expire` once if `finish` is not called within `timeout_s` (0: never)."""

    def __init__(self, timeout_s: float, on_expire: Callable[[], None]):
        self._lock = threading.Lock()
        self._state = "waiting"
        self._on_expire = on_expire
        self._timer = threading.Timer(timeout_s, self._expire) if timeout_s > 0 else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if self._state != "waiting":
                return
            self._state = "expired"
        self._on_expire()

    def finish(self) -> bool:
        """True if this came in time (the caller publishes); False if it expired."""
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._state == "waiting":
                self._state = "finished"
            return self._state == "finished"


class PlanningHandler:
    """Runs the current planner with the current config; both are read once per job."""

    def __init__(self, get_planner: Callable[[], Any], get_config: Callable[[], NodeConfig],
                 get_command: Callable[[], str], odometry: OdometryTracker, stats: NodeStats,
                 outputs_: Outputs, log: ThrottledLog, last_plan: LastPlan,
                 status_name: Callable[[], str]):
        self._planner, self._config, self._command = get_planner, get_config, get_command
        self._odometry, self._stats, self._out, self._log = odometry, stats, outputs_, log
        self._last, self._status_name = last_plan, status_name

    def _publish_stats(self, frame: Frame, record: _PlanRecord) -> None:
        """The frame's `~/output/stats` (what the closed loop through the node reads)."""
        if self._out.stats is None:
            return
        motion = self._odometry.motion()
        values = {"stamp": f"{frame.stamp:.9f}", "command": self._command(),
                  "velocity": f"{motion.velocity[0]:.3f},{motion.velocity[1]:.3f}",
                  **outputs.answer_stats_values("planning", record.parsed, record.ms,
                                                record.stats or DecodeStats(), record.text),
                  "planning.published": str(bool(record.source)).lower(),
                  "planning.source": record.source, "planning.failure": record.failure}
        self._out.stats(outputs.frame_stats_msg(
            frame.header, f"{self._status_name()}: frame", "planner_node", values,
            record.parsed and record.source == MODEL, record.message))

    def _fail(self, level: bytes, kind: str, message: str) -> None:
        self._stats.problem(level, kind, message)
        self._log.at(level == ERROR, kind, message)
        self._out.report(level, f"{kind}: {message}")

    # ------------------------------------------------------------------ frames
    def on_frame(self, frame: Frame, now_s: float) -> None:
        """Plan (and detect) on one frame and publish; `now_s` is the node clock's time."""
        config, planner = self._config(), self._planner()
        if config.max_input_age_s > 0 and now_s - frame.stamp > config.max_input_age_s:
            self._fail(WARN, "stale_frames", f"frame {frame.stamp:.3f} is "
                       f"{now_s - frame.stamp:.2f} s old (max_input_age_s "
                       f"{config.max_input_age_s:g}); dropped")
            return
        if "planning" in config.tasks:
            record = _PlanRecord()
            markers = self._plan(frame, config, planner, record)
            if markers is None:              # timed out: the fallback went out at the deadline
                return
            self._publish_stats(frame, record)
        else:
            markers = [_status_marker(config.output_frame, frame.header.stamp,
                                      "no planning task", True)]
        if "detection" in config.tasks:
            self._detect(frame, planner, markers)
        self._out.markers(outputs.marker_array(markers))

    def _odometry_stale(self, frame: Frame, config: NodeConfig, motion: EgoMotion
                        ) -> str | None:
        """Why the odometry is too old to plan this frame with, or None."""
        if config.max_odometry_age_s <= 0:
            return None
        if motion.stamp is None:
            return f"no odometry yet for frame {frame.stamp:.3f}"
        age = frame.stamp - motion.stamp
        if age > config.max_odometry_age_s:
            return (f"odometry {age:.2f} s older than frame {frame.stamp:.3f} "
                    f"(max_odometry_age_s {config.max_odometry_age_s:g})")
        return None

    def _plan(self, frame: Frame, config: NodeConfig, planner, record: _PlanRecord
              ) -> list[Marker] | None:
        """Publish the frame's Path (the model's or the fallback) and fill ``record``; its
        markers, or None when the deadline passed and published the fallback (and the
        frame's stats) itself."""
        command, motion = self._command(), self._odometry.motion()
        stale = self._odometry_stale(frame, config, motion)
        if stale is not None:
            self._fail(WARN, "odometry_stale", f"{stale}; fallback published")
            self._finished(frame, None, None)
            record.failure, record.message = "odometry_stale", stale
            return self._publish_fallback(frame, config, command, motion, "odometry_stale",
                                          record)
        obs = Observation(images=list(frame.images), command=command,
                          velocity=motion.velocity, acceleration=motion.acceleration,
                          stamp=frame.stamp)

        start = time.monotonic()

        def expire() -> None:
            self._fail(ERROR, "plan_timeouts", f"frame {frame.stamp:.3f} not planned within "
                       f"plan_timeout_s {config.plan_timeout_s:g}; fallback published")
            self._finished(frame, None, None)
            late = _PlanRecord(ms=(time.monotonic() - start) * 1e3, failure="plan_timeouts",
                               message=f"not planned within {config.plan_timeout_s:g} s")
            self._out.markers(outputs.marker_array(self._publish_fallback(
                frame, config, command, motion, "plan_timeouts", late)))
            self._publish_stats(frame, late)

        deadline = Deadline(config.plan_timeout_s, expire)
        result, failure = None, None
        try:
            result = planner.plan(obs)
            record.parsed, record.stats, record.text = True, result.stats, result.text
        except AnswerParseError as exc:
            record.stats, record.text = getattr(exc, "stats", None), exc.raw_text or ""
            failure = ("parse_failures", f"planning answer for frame {frame.stamp:.9f} did "
                                         f"not parse: {clip(exc.reason, 200)}")
        except Exception as exc:  # noqa: BLE001 - a model failure costs this frame's plan only
            failure = ("model_errors", f"planning frame {frame.stamp:.9f} raised "
                                       f"{type(exc).__name__}: {clip(str(exc), 200)}")
            self._log.debug(traceback.format_exc())
        if not deadline.finish():
            self._log.debug(f"the late plan of frame {frame.stamp:.3f} was dropped")
            return None
        record.ms = self._finished(frame, start, result)
        if failure is not None:
            self._fail(ERROR, *failure)
            record.failure, record.message = failure
            return self._publish_fallback(frame, config, command, motion, failure[0], record)
        plan = Plan(frame.stamp, result.waypoints)
        self._last.remember(plan)
        record.source = plan.source
        return self._publish(frame, config, command, plan, "",
                             f"{command}: {result.stats.total_ms:.0f} ms")

    def _publish_fallback(self, frame: Frame, config: NodeConfig, command: str,
                          motion: EgoMotion, reason: str, record: _PlanRecord
                          ) -> list[Marker]:
        speed = motion.velocity[0] if motion.stamp is not None else 0.0
        plan = fallback_plan(config, self._last.get(), frame.stamp, speed)
        self._stats.count("fallback_paths")
        self._stats.count(f"fallback_{plan.source}")
        record.source = plan.source
        return self._publish(frame, config, command, plan, reason,
                             f"{command}: {plan.source} ({reason})")

    def _publish(self, frame: Frame, config: NodeConfig, command: str, plan: Plan,
                 reason: str, text: str) -> list[Marker]:
        """Path and status of `plan` for `frame`; the markers that draw them."""
        origin, frame_id = (0.0, 0.0, 0.0), config.output_frame
        if config.path_in_odom:
            try:
                frame_id, *pose = self._odometry.pose_at(frame.stamp, tolerance_s=0.25)
                origin = tuple(pose)
            except BadInput as exc:
                frame_id = config.output_frame
                self._fail(WARN, exc.kind, f"{exc}; path for frame {frame.stamp:.3f} "
                                           f"published in {frame_id} instead")
        path = outputs.path_msg(plan.waypoints, frame.header.stamp, frame_id, origin)
        self._out.path(path)
        self._out.status(outputs.plan_status_msg(frame.header.stamp, self._status_name(),
                                                 plan.source, reason, command, plan.age_s))
        self._stats.count("paths_published")
        self._log.debug(f"frame {frame.stamp:.3f}: {plan.source} path published ({text})")
        return [*outputs.path_markers(path),
                _status_marker(config.output_frame, frame.header.stamp, text,
                               plan.source == MODEL)]

    def _finished(self, frame: Frame, start: float | None, result) -> float:
        """Count the planned frame (``start``: when the planner was called, None when it was
        not or did not finish); returns the wall milliseconds since ``start`` (0 without)."""
        now = time.monotonic()
        planner_ms = None
        if start is not None:
            planner_ms = result.stats.total_ms if result is not None else (now - start) * 1e3
        tpf = result.stats.tokens_per_forward if result is not None else None
        self._stats.count("frames_planned")
        self._stats.planned(frame.stamp, (now - frame.received) * 1e3, planner_ms, tpf)
        return (now - start) * 1e3 if start is not None else 0.0

    def _detect(self, frame: Frame, planner, markers: list) -> None:
        detections = []
        try:
            detections = planner.detect(list(frame.images)).detections
        except AnswerParseError as exc:
            self._fail(ERROR, "parse_failures", f"detection answer for frame "
                       f"{frame.stamp:.9f} did not parse: {clip(exc.reason, 200)}; "
                       "an empty Detection2DArray published")
        except Exception as exc:  # noqa: BLE001
            self._fail(ERROR, "model_errors", f"detection on frame {frame.stamp:.9f} raised "
                       f"{type(exc).__name__}: {clip(str(exc), 200)}; an empty "
                       "Detection2DArray published")
        height, width = frame.images[0].shape[:2]
        markers.extend(outputs.detection_markers(detections, frame.header, width, height))
        if self._out.detections is not None:
            self._out.detections(outputs.detections_msg(detections, frame.header))

    # --------------------------------------------------------------- questions
    def on_question(self, question: str, frame: Frame) -> None:
        """Answer `question` on `frame` and publish the text (empty when it failed)."""
        planner, echo = self._planner(), self._config().max_echo_chars
        text = ""
        try:
            text = planner.answer(list(frame.images), question).text
            self._stats.count("questions_answered")
        except PromptTooLong as exc:
            self._stats.count("questions_refused")
            self._fail(WARN, "question_too_long", f"question {clip(question, echo)} refused: "
                                                  f"{exc}")
        except AnswerParseError as exc:
            self._fail(ERROR, "parse_failures", f"answer to {clip(question, echo)} did not "
                                                f"parse: {clip(exc.reason, 200)}")
        except Exception as exc:  # noqa: BLE001
            self._fail(ERROR, "model_errors", f"answering {clip(question, echo)} raised "
                                              f"{type(exc).__name__}: {clip(str(exc), 200)}")
        self._out.answer(String(data=text))
