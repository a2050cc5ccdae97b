"""The node's outputs: each outcome of the planning path published once.

`NodeOutputs` owns the result publishers (lifecycle publishers: results go out only while
the node is active) and turns a `PlanOutcome` into the Path, its status, the frame's stats,
the processing time and, last, the markers; an `AnswerOutcome` into the answer. Every
problem an outcome carries is counted, logged and reported on /diagnostics at once through
the `Reporter`. It decides nothing: the scheduler (`scheduler.py`) says what goes out, once
per job.
"""
from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import ColorRGBA, Float64, String
from visualization_msgs.msg import Marker, MarkerArray

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_ros.node import candidates as candidate_msgs
from wamdiff2_ros.node import outputs
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.diagnostics import WARN, NodeStats, Reporter
from wamdiff2_ros.node.fallback import MODEL
from wamdiff2_ros.node.odometry import OdometryTracker
from wamdiff2_ros.node.planning import AnswerOutcome, PlanOutcome
from wamdiff2_ros.node.qos import OUTPUT_QOS
from wamdiff2_ros.node.topics import (ANSWER_TOPIC, CANDIDATE_MARKERS_TOPIC,
                                      CANDIDATES_TOPIC, DETECTIONS_TOPIC, MARKERS_TOPIC,
                                      PATH_TOPIC, PROCESSING_TIME_TOPIC, STATS_TOPIC,
                                      STATUS_TOPIC)
from wamdiff2_ros.node.worker import Frame, FrameJob


def status_marker(frame_id: str, stamp, text: str, ok: bool) -> Marker:
    """The text marker that says what a frame's Path is (green: the model's; red: not)."""
    colour = ColorRGBA(r=0.1, g=0.9, b=0.3, a=1.0) if ok else ColorRGBA(r=1.0, g=0.2,
                                                                         b=0.2, a=1.0)
    m = Marker(ns="wamdiff2/status", id=0, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD,
               color=colour, text=text)
    m.header.frame_id, m.header.stamp = frame_id, stamp
    m.pose.position.z, m.pose.orientation.w, m.scale.z = 2.0, 1.0, 0.5
    return m


def stamp_text(stamp) -> str:
    """A builtin_interfaces/Time as exact decimal seconds (sec.nanosec, nine digits)."""
    return f"{stamp.sec}.{stamp.nanosec:09d}"


class NodeOutputs:
    """The publishers of one node's results, and what each outcome publishes."""

    def __init__(self, node, stats: NodeStats, reporter: Reporter, odometry: OdometryTracker,
                 status_name: str):
        self._stats, self.reporter, self._odometry = stats, reporter, odometry
        self._name = status_name
        self.last_path_at: float | None = None       # time.monotonic() of the last Path

        def publisher(msg_type, topic):
            return node.create_lifecycle_publisher(msg_type, topic, OUTPUT_QOS)

        self._path = publisher(Path, PATH_TOPIC)
        self._markers = publisher(MarkerArray, MARKERS_TOPIC)
        self._answer = publisher(String, ANSWER_TOPIC)
        self._status = publisher(DiagnosticArray, STATUS_TOPIC)
        self._frame_stats = publisher(DiagnosticArray, STATS_TOPIC)
        self._processing_ms = publisher(Float64, PROCESSING_TIME_TOPIC)
        self._candidates = publisher(PointCloud2, CANDIDATES_TOPIC)
        self._candidate_markers = publisher(MarkerArray, CANDIDATE_MARKERS_TOPIC)
        self._detections = (publisher(outputs.Detection2DArray, DETECTIONS_TOPIC)
                            if outputs.HAVE_VISION_MSGS else None)

    # ------------------------------------------------------------------ frames
    def publish_plan(self, outcome: PlanOutcome) -> list[Marker]:
        """Count and report `outcome`; unless it is a refusal, publish its Path, status,
        frame stats and processing time. Returns the markers that draw it (none for a
        refusal)."""
        if outcome.failure:
            self.reporter.problem(outcome.level, outcome.failure, outcome.message,
                                   bad_input=outcome.bad_input)
        if outcome.refused:
            return []
        job, plan = outcome.job, outcome.plan
        frame, config, command = job.frame, job.settings.config, job.settings.command
        if plan.source != MODEL:
            self._stats.count("fallback_paths")
            self._stats.count(f"fallback_{plan.source}")
        path = self._path_msg(outcome)
        self._path.publish(path)
        self.last_path_at = time.monotonic()
        cset = outcome.candidates if plan.source == MODEL else None
        self._status.publish(outputs.plan_status_msg(
            frame.header.stamp, self._name, plan.source, outcome.failure, command, plan.age_s,
            outcome.detail, candidate_msgs.status_values(cset) if cset is not None else None))
        if cset is not None:
            self._publish_candidates(cset, path.header)
        now = time.monotonic()
        self._processing_ms.publish(Float64(data=(now - frame.received) * 1e3))
        self._stats.count("paths_published")
        self._stats.count("frames_planned")
        self._stats.planned(frame.stamp, (now - frame.received) * 1e3, outcome.planner_ms,
                            outcome.stats.tokens_per_forward if outcome.parsed else None)
        self._publish_frame_stats(outcome)
        text = (f"{command}: {outcome.stats.total_ms:.0f} ms" if plan.source == MODEL
                else f"{command}: {plan.source} ({outcome.failure})")
        self.reporter.log.debug(f"frame {frame.stamp:.3f}: {plan.source} path published "
                                 f"({text})")
        return [*outputs.path_markers(path),
                status_marker(config.output_frame, frame.header.stamp, text,
                              plan.source == MODEL)]

    def _publish_candidates(self, cset, header) -> None:
        """The frame's candidates (the Path's frame and stamp) and their markers; a scorer
        that fell back is reported (counted, logged, on /diagnostics)."""
        self._candidates.publish(candidate_msgs.candidates_cloud(cset, header))
        self._candidate_markers.publish(outputs.marker_array(
            candidate_msgs.candidate_markers(cset, header)))
        if cset.selection.fallback:
            self.reporter.problem(WARN, "scorer_fallbacks", cset.selection.fallback)

    def _path_msg(self, outcome: PlanOutcome) -> Path:
        """The outcome's Path: ego frame, or the odometry's frame placed with its pose."""
        frame, config = outcome.job.frame, outcome.job.settings.config
        origin, frame_id = (0.0, 0.0, 0.0), config.output_frame
        if config.path_in_odom:
            try:
                frame_id, *pose = self._odometry.pose_at(frame.stamp, tolerance_s=0.25)
                origin = tuple(pose)
            except BadInput as exc:
                frame_id = config.output_frame
                self.reporter.problem(WARN, exc.kind, f"{exc}; path for frame "
                                                       f"{frame.stamp:.3f} published in "
                                                       f"{frame_id} instead")
        return outputs.path_msg(outcome.plan.waypoints, frame.header.stamp, frame_id, origin)

    def _publish_frame_stats(self, outcome: PlanOutcome) -> None:
        """The frame's `~/output/stats` (what the closed loop through the node reads)."""
        frame, motion = outcome.job.frame, outcome.motion
        values = {"stamp": stamp_text(frame.header.stamp),
                  "command": outcome.job.settings.command,
                  "cameras": ",".join(outcome.job.settings.config.cameras),
                  "images": str(len(frame.images)),
                  "velocity": f"{motion.velocity[0]:.3f},{motion.velocity[1]:.3f}",
                  **outputs.answer_stats_values("planning", outcome.parsed, outcome.ms,
                                                outcome.stats or DecodeStats(),
                                                outcome.text),
                  "planning.published": "true", "planning.source": outcome.source,
                  "planning.failure": outcome.failure}
        self._frame_stats.publish(outputs.frame_stats_msg(
            frame.header, f"{self._name}: frame", "planner_node", values,
            outcome.parsed and outcome.source == MODEL, outcome.message or "ok"))

    def publish_markers(self, job: FrameJob, markers: list[Marker],
                        detections: list | None) -> None:
        """The frame's MarkerArray, with `detections`' boxes (None: detection not run), and
        the Detection2DArray (empty when detection failed)."""
        frame: Frame = job.frame
        if detections is not None:
            height, width = frame.images[0].shape[:2]
            markers = [*markers, *outputs.detection_markers(detections, frame.header, width,
                                                            height)]
            if self._detections is not None:
                self._detections.publish(outputs.detections_msg(detections, frame.header))
        self._markers.publish(outputs.marker_array(markers))

    # --------------------------------------------------------------- questions
    def publish_refused_answer(self) -> None:
        """The empty answer of a question refused on arrival (counted where refused)."""
        self._answer.publish(String(data=""))

    def publish_answer(self, outcome: AnswerOutcome) -> None:
        """Count and report `outcome` and publish its answer (empty when there is none)."""
        self._stats.count(outcome.counter)
        if outcome.kind:
            self.reporter.problem(outcome.level, outcome.kind, outcome.message)
        self._answer.publish(String(data=outcome.text))

