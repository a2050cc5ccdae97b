"""The worker side of the node: one frame or question in, messages out, never an exception.

`PlanningHandler` runs the planner on a `Frame` and publishes the Path, markers and
detections, or answers a question. Every failure (malformed answer, exception inside the
model, missing odometry pose) is counted in `NodeStats` and reported at once on
/diagnostics; the frame is dropped and the worker goes on with the next one.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from std_msgs.msg import ColorRGBA, String
from visualization_msgs.msg import Marker

from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.types import Observation
from wamdiff2_ros.node import outputs
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.diagnostics import ERROR, WARN, NodeStats
from wamdiff2_ros.node.odometry import OdometryTracker
from wamdiff2_ros.node.params import NodeConfig
from wamdiff2_ros.node.worker import Frame


@dataclass(frozen=True)
class Outputs:
    """Where results go: publish callables (None where that output does not exist)."""

    path: Callable[[Any], None]
    markers: Callable[[Any], None]
    answer: Callable[[Any], None]
    detections: Callable[[Any], None] | None
    report: Callable[[bytes, str], None]      # publish a diagnostic now (level, message)


def _status_marker(frame_id: str, stamp, text: str, ok: bool) -> Marker:
    colour = ColorRGBA(r=0.1, g=0.9, b=0.3, a=1.0) if ok else ColorRGBA(r=1.0, g=0.2,
                                                                         b=0.2, a=1.0)
    m = Marker(ns="wamdiff2/status", id=0, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD,
               color=colour, text=text)
    m.header.frame_id, m.header.stamp = frame_id, stamp
    m.pose.position.z, m.pose.orientation.w, m.scale.z = 2.0, 1.0, 0.5
    return m


class PlanningHandler:
    """Runs the current planner with the current config; both are read once per job."""

    def __init__(self, get_planner: Callable[[], Any], get_config: Callable[[], NodeConfig],
                 get_command: Callable[[], str], odometry: OdometryTracker, stats: NodeStats,
                 outputs_: Outputs, logger):
        self._planner, self._config, self._command = get_planner, get_config, get_command
        self._odometry, self._stats, self._out, self._log = odometry, stats, outputs_, logger

    def _fail(self, level: bytes, kind: str, message: str) -> None:
        self._stats.problem(level, kind, message)
        (self._log.error if level == ERROR else self._log.warning)(f"{kind}: {message}")
        self._out.report(level, f"{kind}: {message}")

    def on_frame(self, frame: Frame, now_s: float) -> None:
        """Plan (and detect) on one frame and publish; `now_s` is the node clock's time."""
        config, planner = self._config(), self._planner()
        if config.max_input_age_s > 0 and now_s - frame.stamp > config.max_input_age_s:
            self._fail(WARN, "stale_frames", f"frame {frame.stamp:.3f} is "
                       f"{now_s - frame.stamp:.2f} s old (max_input_age_s "
                       f"{config.max_input_age_s:g}); dropped")
            return
        markers: list[Marker] = []
        status = "no planning task"
        ok = True
        if "planning" in config.tasks:
            ok, status = self._plan(frame, config, planner, markers)
        if "detection" in config.tasks:
            self._detect(frame, planner, markers)
        frame_id = config.output_frame
        markers.append(_status_marker(frame_id, frame.header.stamp, status, ok))
        self._out.markers(outputs.marker_array(markers))

    def _plan(self, frame: Frame, config: NodeConfig, planner, markers: list) -> tuple[bool,
                                                                                       str]:
        motion = self._odometry.motion()
        command = self._command()
        obs = Observation(images=list(frame.images), command=command,
                          velocity=motion.velocity, acceleration=motion.acceleration,
                          stamp=frame.stamp)
        start = time.monotonic()
        try:
            result = planner.plan(obs)
        except AnswerParseError as exc:
            self._finished(frame, start, None)
            self._fail(ERROR, "parse_failures", f"planning answer for frame "
                       f"{frame.stamp:.9f} did not parse: {exc.reason}")
            return False, f"{command}: no plan (the answer did not parse)"
        except Exception as exc:  # noqa: BLE001 - a model failure drops the frame only
            self._finished(frame, start, None)
            self._fail(ERROR, "model_errors", f"planning frame {frame.stamp:.9f} raised "
                       f"{type(exc).__name__}: {exc}")
            self._log.debug(traceback.format_exc())
            return False, f"{command}: no plan ({type(exc).__name__})"
        origin, frame_id = (0.0, 0.0, 0.0), config.output_frame
        if config.path_in_odom:
            try:
                frame_id, *pose = self._odometry.pose_at(frame.stamp, tolerance_s=0.25)
                origin = tuple(pose)
            except BadInput as exc:
                self._finished(frame, start, result)
                self._fail(WARN, exc.kind, f"{exc}; path for frame {frame.stamp:.9f} "
                           "not published")
                return False, f"{command}: no plan (no odometry pose)"
        path = outputs.path_msg(result.waypoints, frame.header.stamp, frame_id, origin)
        self._out.path(path)
        self._finished(frame, start, result)
        self._stats.count("paths_published")
        markers.extend(outputs.path_markers(path))
        return True, f"{command}: {result.stats.total_ms:.0f} ms"

    def _finished(self, frame: Frame, start: float, result) -> None:
        now = time.monotonic()
        planner_ms = result.stats.total_ms if result is not None else (now - start) * 1e3
        tpf = result.stats.tokens_per_forward if result is not None else None
        self._stats.count("frames_planned")
        self._stats.planned(frame.stamp, (now - frame.received) * 1e3, planner_ms, tpf)

    def _detect(self, frame: Frame, planner, markers: list) -> None:
        try:
            result = planner.detect(list(frame.images))
        except AnswerParseError as exc:
            self._fail(ERROR, "parse_failures", f"detection answer for frame "
                       f"{frame.stamp:.9f} did not parse: {exc.reason}")
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(ERROR, "model_errors", f"detection on frame {frame.stamp:.9f} raised "
                       f"{type(exc).__name__}: {exc}")
            return
        height, width = frame.images[0].shape[:2]
        markers.extend(outputs.detection_markers(result.detections, frame.header, width,
                                                 height))
        if self._out.detections is not None:
            self._out.detections(outputs.detections_msg(result.detections, frame.header))

    def on_question(self, question: str, frame: Frame) -> None:
        """Answer `question` on `frame` and publish the text."""
        planner = self._planner()
        try:
            result = planner.answer(list(frame.images), question)
        except AnswerParseError as exc:
            self._fail(ERROR, "parse_failures", f"answer to {question!r} did not parse: "
                                                f"{exc.reason}")
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(ERROR, "model_errors", f"answering {question!r} raised "
                                              f"{type(exc).__name__}: {exc}")
            return
        self._out.answer(String(data=result.text))
        self._stats.count("questions_answered")
