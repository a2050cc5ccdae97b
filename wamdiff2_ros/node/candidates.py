"""The frame's candidate plans as ROS messages: one a downstream node reads, one RViz draws.

`~/output/candidates` is a `sensor_msgs/PointCloud2` (a standard, stamped message with typed
fields; Jazzy's wheels carry no candidate-trajectory message such as Autoware's): one point
per waypoint of every candidate that parsed, in the Path's frame and stamp, with the fields

| field | type | meaning |
|---|---|---|
| `x`, `y`, `z` | float32 | the waypoint, metres (z = 0) |
| `t` | float32 | seconds after the image stamp (0.5 .. 4.0) |
| `candidate` | uint32 | the row of the batch (0: the greedy plan for the frame's command) |
| `score` | float32 | the scorer's score of the candidate (higher is better; NaN: ruled out or the scorer failed) |
| `log_confidence` | float32 | the model's mean log probability of the candidate's tokens |
| `chosen` | uint8 | 1 on the candidate the Path is |

`read_candidates` turns such a message back into plain candidates (what a subscriber
without `sensor_msgs_py` does with numpy). `candidate_markers` draws the candidates for
RViz (`~/output/candidates/markers`): the chosen one thick and green, the others thin, more
opaque the better they scored, each with its score at its end.
"""
from __future__ import annotations

import math

import numpy as np
from geometry_msgs.msg import Point
from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker

from wamdiff2_core.candidates import CandidateSet
from wamdiff2_core.tasks import WAYPOINT_DT_S

#: (name, PointField datatype, numpy dtype) of each field, in memory order.
FIELDS = (("x", PointField.FLOAT32, "<f4"), ("y", PointField.FLOAT32, "<f4"),
          ("z", PointField.FLOAT32, "<f4"), ("t", PointField.FLOAT32, "<f4"),
          ("candidate", PointField.UINT32, "<u4"), ("score", PointField.FLOAT32, "<f4"),
          ("log_confidence", PointField.FLOAT32, "<f4"), ("chosen", PointField.UINT8, "u1"))
POINT = np.dtype([(name, dtype) for name, _, dtype in FIELDS])
_CHOSEN = ColorRGBA(r=0.1, g=0.9, b=0.3, a=1.0)


def candidates_cloud(cset: CandidateSet, header: Header) -> PointCloud2:
    """The candidates of one frame as a PointCloud2 (module docstring)."""
    selection = cset.selection
    rows = []
    for i in cset.valid_indices():
        cand = cset.candidates[i]
        score = selection.scores[i] if selection is not None else math.nan
        score = score if math.isfinite(score) else math.nan
        chosen = int(selection is not None and selection.chosen == i)
        for k, (x, y) in enumerate(cand.waypoints):
            rows.append((x, y, 0.0, (k + 1) * WAYPOINT_DT_S, i, score, cand.log_confidence,
                         chosen))
    data = np.array(rows, dtype=POINT)
    offsets = [POINT.fields[name][1] for name, _, _ in FIELDS]
    return PointCloud2(
        header=header, height=1, width=len(data),
        fields=[PointField(name=name, offset=offset, datatype=datatype, count=1)
                for (name, datatype, _), offset in zip(FIELDS, offsets)],
        is_bigendian=False, point_step=POINT.itemsize, row_step=POINT.itemsize * len(data),
        data=data.tobytes(), is_dense=True)


def read_candidates(msg: PointCloud2) -> list[dict]:
    """The candidates a `candidates_cloud` message holds, by row: ``{"candidate", "score",
    "log_confidence", "chosen", "waypoints" (8, 2)}``. Fields are found by name and offset,
    as any PointCloud2 reader does."""
    names = {f.name: f.offset for f in msg.fields}
    dtype = np.dtype({"names": [n for n, _, _ in FIELDS], "formats": [d for _, _, d in FIELDS],
                      "offsets": [names[n] for n, _, _ in FIELDS],
                      "itemsize": msg.point_step})
    points = np.frombuffer(bytes(msg.data), dtype=dtype, count=msg.width * msg.height)
    out = []
    for row in dict.fromkeys(points["candidate"].tolist()):
        mine = points[points["candidate"] == row]
        out.append({"candidate": int(row), "score": float(mine["score"][0]),
                    "log_confidence": float(mine["log_confidence"][0]),
                    "chosen": bool(mine["chosen"][0]),
                    "waypoints": np.stack([mine["x"], mine["y"]], axis=1).astype(np.float64)})
    return out


def candidate_markers(cset: CandidateSet, header: Header) -> list[Marker]:
    """RViz markers of the candidates (module docstring; ``outputs.marker_array`` puts the
    DELETEALL that clears the last frame's in front)."""
    markers = []
    selection = cset.selection
    scores = [s for s in (selection.scores if selection else []) if math.isfinite(s)]
    lo, hi = (min(scores), max(scores)) if scores else (0.0, 1.0)
    for i in cset.valid_indices():
        cand = cset.candidates[i]
        chosen = selection is not None and selection.chosen == i
        score = selection.scores[i] if selection is not None else math.nan
        rank = (score - lo) / (hi - lo) if math.isfinite(score) and hi > lo else 0.5
        colour = _CHOSEN if chosen else ColorRGBA(r=0.3, g=0.6, b=1.0, a=0.25 + 0.6 * rank)
        line = Marker(ns="wamdiff2/candidates", id=2 * i, type=Marker.LINE_STRIP,
                      action=Marker.ADD, color=colour)
        line.header = header
        line.pose.orientation.w = 1.0
        line.scale.x = 0.2 if chosen else 0.06
        line.points = [Point()] + [Point(x=float(x), y=float(y)) for x, y in cand.waypoints]
        label = Marker(ns="wamdiff2/candidates", id=2 * i + 1, type=Marker.TEXT_VIEW_FACING,
                       action=Marker.ADD, color=colour,
                       text=f"{i}: {score:.3g}" if math.isfinite(score) else f"{i}")
        label.header = header
        label.pose.position = Point(x=float(cand.waypoints[-1, 0]),
                                    y=float(cand.waypoints[-1, 1]), z=0.5)
        label.pose.orientation.w, label.scale.z = 1.0, 0.4
        markers += [line, label]
    return markers


def status_values(cset: CandidateSet) -> dict[str, str]:
    """The `~/output/status` key/values of a frame's candidates: how many, the scorer, its
    choice and margin over the runner-up, and why it fell back (empty when it did not)."""
    sel = cset.selection
    return {"candidates": str(len(cset)), "candidates.valid": str(len(cset.valid_indices())),
            "scorer": sel.scorer, "scorer.chosen": str(sel.chosen),
            "scorer.margin": f"{sel.margin:.6g}" if math.isfinite(sel.margin) else "",
            "scorer.fallback": sel.fallback}
