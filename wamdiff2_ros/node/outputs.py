"""Planner results -> ROS messages: Path, RViz markers, Detection2DArray, plan status,
per-frame stats.

Pure functions of their arguments (no node, no clock): every output carries the stamp the
caller passes, which the node sets to the input image's stamp; each pose of a Path carries
its own time (the image stamp + 0.5 s, + 1.0 s, ...).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, PoseStamped, Quaternion
from nav_msgs.msg import Path
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker, MarkerArray

from wamdiff2_core.tasks import WAYPOINT_DT_S

try:  # vision_msgs is not on PyPI; publish detections only where a ROS install has it.
    from vision_msgs.msg import (BoundingBox2D, Detection2D, Detection2DArray,
                                 ObjectHypothesisWithPose)
except ImportError:  # pragma: no cover - depends on the installation
    Detection2DArray = None

HAVE_VISION_MSGS = Detection2DArray is not None


def headings(waypoints: np.ndarray) -> np.ndarray:
    """Heading of each waypoint: the direction from the previous one (the first from the origin).

    waypoints: (N, 2) metres. Returns (N,) radians. A step shorter than 1 cm (standing still)
    keeps the previous heading, starting from 0 (straight ahead).
    """
    prev = np.vstack([np.zeros((1, 2)), waypoints[:-1]])          # (N, 2)
    delta = waypoints - prev                                      # (N, 2)
    out = np.zeros(len(waypoints))
    heading = 0.0
    for i, (dx, dy) in enumerate(delta):
        if math.hypot(dx, dy) >= 0.01:
            heading = math.atan2(dy, dx)
        out[i] = heading
    return out


def transform_2d(waypoints: np.ndarray, x: float, y: float, yaw: float) -> np.ndarray:
    """Ego-frame points (N, 2) expressed in a frame where the ego sits at (x, y, yaw)."""
    c, s = math.cos(yaw), math.sin(yaw)
    rot = np.array([[c, -s], [s, c]])                             # (2, 2)
    return waypoints @ rot.T + np.array([x, y])                   # (N, 2)


def quaternion_from_yaw(yaw: float) -> Quaternion:
    return Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2.0), w=math.cos(yaw / 2.0))


def stamp_plus(stamp: Time, seconds: float) -> Time:
    """`stamp` + `seconds` (exact to the nanosecond for multiples of 0.5 s)."""
    ns = stamp.sec * 1_000_000_000 + stamp.nanosec + int(round(seconds * 1e9))
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def path_msg(waypoints: np.ndarray, stamp: Time, frame_id: str,
             origin: tuple[float, float, float] = (0.0, 0.0, 0.0),
             step_s: float = WAYPOINT_DT_S) -> Path:
    """A nav_msgs/Path with one pose per waypoint, each with its heading and its time.

    waypoints: (N, 2) ego frame (x forward, y left), at `step_s`, 2 `step_s`, ... after
    `stamp` (the path's stamp); pose k is stamped `stamp` + (k + 1) `step_s`. `origin` =
    (x, y, yaw) of the ego in `frame_id` at `stamp`: zeros for an ego-frame path, the
    odometry pose for an odom path.
    """
    wp = np.asarray(waypoints, dtype=np.float64).reshape(-1, 2)
    yaw0 = origin[2]
    points = transform_2d(wp, *origin)                            # (N, 2)
    msg = Path(header=Header(stamp=stamp, frame_id=frame_id))
    for k, ((px, py), heading) in enumerate(zip(points, headings(wp) + yaw0)):
        # each pose its own Header, stamped at its own time
        pose = PoseStamped(header=Header(stamp=stamp_plus(stamp, (k + 1) * step_s),
                                         frame_id=frame_id))
        pose.pose.position = Point(x=float(px), y=float(py), z=0.0)
        pose.pose.orientation = quaternion_from_yaw(float(heading))
        msg.poses.append(pose)
    return msg


_PATH_COLOUR = ColorRGBA(r=0.1, g=0.9, b=0.3, a=1.0)
_BOX_COLOUR = ColorRGBA(r=1.0, g=0.6, b=0.0, a=1.0)


def _marker(header: Header, ns: str, mid: int, mtype: int, colour: ColorRGBA) -> Marker:
    m = Marker(header=header, ns=ns, id=mid, type=mtype, action=Marker.ADD,
               color=colour, lifetime=Duration(sec=0, nanosec=0))
    m.pose.orientation.w = 1.0
    return m


def path_markers(path: Path) -> list[Marker]:
    """A line through the path's poses and an arrow per pose showing its heading."""
    line = _marker(path.header, "wamdiff2/path", 0, Marker.LINE_STRIP, _PATH_COLOUR)
    line.scale.x = 0.15
    line.points = [p.pose.position for p in path.poses]
    arrows = []
    for i, pose in enumerate(path.poses):
        arrow = _marker(path.header, "wamdiff2/headings", i, Marker.ARROW, _PATH_COLOUR)
        arrow.pose = pose.pose
        arrow.scale.x, arrow.scale.y, arrow.scale.z = 0.8, 0.12, 0.12
        arrows.append(arrow)
    return [line, *arrows]


def detection_markers(detections: Sequence, image_header: Header, width: int,
                      height: int) -> list[Marker]:
    """Each 2-D box drawn on a virtual image plane 1 m ahead of the camera, with its label.

    The plane lies in the image's frame (REP-103 optical frame: z forward, x right, y down),
    scaled so the image is 1 m wide: a picture of the detections, not a 3-D position.
    """
    def to_plane(u: float, v: float) -> Point:
        return Point(x=(u - width / 2.0) / width, y=(v - height / 2.0) / width, z=1.0)

    boxes = _marker(image_header, "wamdiff2/detections", 0, Marker.LINE_LIST, _BOX_COLOUR)
    boxes.scale.x = 0.004
    labels = []
    for i, det in enumerate(detections):
        x1, y1, x2, y2 = (float(c) for c in det.box)
        corners = [to_plane(x1, y1), to_plane(x2, y1), to_plane(x2, y2), to_plane(x1, y2)]
        for a, b in zip(corners, corners[1:] + corners[:1]):
            boxes.points += [a, b]
        text = _marker(image_header, "wamdiff2/labels", i, Marker.TEXT_VIEW_FACING,
                       _BOX_COLOUR)
        text.pose.position = corners[0]
        text.scale.z = 0.03
        text.text = f"{det.label} {det.score:.2f}"
        labels.append(text)
    return [boxes, *labels] if detections else []


def marker_array(markers: Sequence[Marker]) -> MarkerArray:
    """A MarkerArray that first clears what the node drew before, then draws `markers`."""
    clear = Marker(action=Marker.DELETEALL)
    return MarkerArray(markers=[clear, *markers])


def detections_msg(detections: Sequence, image_header: Header):
    """A vision_msgs/Detection2DArray (pixel boxes; none: the explicit empty result of a
    failed detection), or None where vision_msgs is missing."""
    if not HAVE_VISION_MSGS:
        return None
    msg = Detection2DArray(header=image_header)
    for det in detections:
        x1, y1, x2, y2 = (float(c) for c in det.box)
        d = Detection2D(header=image_header)
        d.bbox = BoundingBox2D()
        d.bbox.center.position.x, d.bbox.center.position.y = (x1 + x2) / 2, (y1 + y2) / 2
        d.bbox.size_x, d.bbox.size_y = x2 - x1, y2 - y1
        hyp = ObjectHypothesisWithPose()
        hyp.hypothesis.class_id, hyp.hypothesis.score = str(det.label), float(det.score)
        d.results.append(hyp)
        msg.detections.append(d)
    return msg


#: Plan source -> its level on ~/output/status: the model's plan is OK, a re-timed last plan
#: a warning, a stop an error.
SOURCE_LEVELS = {"model": DiagnosticStatus.OK, "last_plan": DiagnosticStatus.WARN,
                 "stop": DiagnosticStatus.ERROR}


def plan_status_msg(stamp: Time, name: str, source: str, reason: str, command: str,
                    age_s: float | None = None, detail: str = "",
                    extra: dict[str, str] | None = None) -> DiagnosticArray:
    """The `~/output/status` message of one published Path: stamped like it (the image
    stamp), one status named `name` whose level and values say where it came from
    (`source`: model, last_plan, stop) and why (`reason`: empty for the model's own plan,
    else the counter of the failure, e.g. parse_failures, odometry_stale, camera_missing;
    `detail`: which inputs it lacked, e.g. the camera named, in the message too; `extra`:
    more key/values, e.g. the candidates' scorer, its choice and margin)."""
    message = source if not reason else f"{source}: {reason}"
    if detail:
        message += f" ({detail})"
    values = [KeyValue(key="source", value=source), KeyValue(key="reason", value=reason),
              KeyValue(key="command", value=command),
              KeyValue(key="stamp", value=f"{stamp.sec}.{stamp.nanosec:09d}")]
    if age_s is not None:
        values.append(KeyValue(key="plan_age_s", value=f"{age_s:.3f}"))
    if detail:
        values.append(KeyValue(key="detail", value=detail))
    values += [KeyValue(key=k, value=v) for k, v in (extra or {}).items()]
    status = DiagnosticStatus(level=SOURCE_LEVELS[source], name=name, message=message,
                              hardware_id="wamdiff2", values=values)
    return DiagnosticArray(header=Header(stamp=stamp), status=[status])


def answer_stats_values(task: str, parsed: bool, ms: float, stats, text: str
                        ) -> dict[str, str]:
    """The key/values of one task's answer in a frame's stats message (``stats``: its
    DecodeStats): ``<task>.parsed``, ``.ms``, ``.tokens``, ``.forwards``,
    ``.denoise_forwards``, ``.blocks``, ``.tokens_per_forward`` and the raw ``.text``."""
    return {f"{task}.parsed": str(bool(parsed)).lower(), f"{task}.ms": f"{ms:.1f}",
            f"{task}.tokens": str(stats.tokens), f"{task}.forwards": str(stats.forwards),
            f"{task}.denoise_forwards": str(stats.denoise_forwards),
            f"{task}.blocks": str(stats.blocks),
            f"{task}.tokens_per_forward": f"{stats.tokens_per_forward:.2f}",
            f"{task}.text": text}


def frame_stats_msg(header: Header, name: str, hardware_id: str, values: dict[str, str],
                    ok: bool, message: str) -> DiagnosticArray:
    """One frame's stats (``~/output/stats``; `bag eval` writes the same): a DiagnosticArray
    stamped with the image's header, level OK, or ERROR when an answer failed."""
    status = DiagnosticStatus(level=DiagnosticStatus.OK if ok else DiagnosticStatus.ERROR,
                              name=name, message=message, hardware_id=hardware_id,
                              values=[KeyValue(key=k, value=v) for k, v in values.items()])
    return DiagnosticArray(header=header, status=[status])
