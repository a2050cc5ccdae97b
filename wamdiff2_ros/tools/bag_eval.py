"""``wamdiff2 bag eval``: the planner on every camera frame of a bag, offline (no DDS).

For each frame: plan (and detect) with the node's own input conversions, write the results
as messages into an output bag (the node's output topics, plus per-frame stats), draw the
plan over the image (PNG), and score against the bag's ground truth with the open-loop
scorers of `wamdiff2_core.evaluation` (L2, collisions, mAP). Every output is staged next to
its final path and moved there only when the run succeeds.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.serialization import serialize_message
from std_msgs.msg import ColorRGBA, Header, String
from visualization_msgs.msg import Marker

from wamdiff2_core.decoding import DecodeConfig
from wamdiff2_core.evaluation.open_loop import OpenLoopReport
from wamdiff2_core.evaluation.scorers import SCORERS
from wamdiff2_ros.node import outputs
from wamdiff2_ros.tools.bag_frames import (BagFrame, FrameTopics, camera_document, check_bag,
                                           read_frames)
from wamdiff2_ros.tools.bag_io import (BagError, BagReader, BagWriter, publish_atomically,
                                       remove_stale_partials, remove_staged, staged_path,
                                       usable_path)
from wamdiff2_ros.tools.bag_layout import BASE_FRAME, TYPES, OutputTopics
from wamdiff2_ros.tools.bag_overlay import CameraModel, draw_overlay, write_png
from wamdiff2_ros.tools.bag_predict import FramePrediction, load_predictor, predictor_cameras

TASKS = ("planning", "detection")


@dataclass(frozen=True)
class EvalConfig:
    """One `bag eval` run."""

    bag: Path
    out: Path                               # output bag (.mcap file or rosbag2 directory)
    report: Path                            # JSON report
    frames_dir: Path | None                 # overlay PNGs; None: none
    checkpoint: str | None = None           # None: the bundled model
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    device: str = "cpu"
    tasks: tuple[str, ...] = TASKS
    camera_topic: str | None = None
    camera_topics: dict[str, str] | None = None   # several cameras: name -> topic
    odometry_topic: str | None = None
    command_topic: str | None = None
    gt_topic: str | None = None
    default_command: str = "straight"
    limit: int | None = None
    output_node: str = "wamdiff2_planner"
    progress: bool = True


def latency_summary(values_ms: list[float]) -> dict:
    """mean / p50 / p90 / max of a list of milliseconds (None values when it is empty)."""
    if not values_ms:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "max": None}
    arr = np.asarray(values_ms, dtype=np.float64)
    return {"count": int(arr.size), "mean": round(float(arr.mean()), 2),
            "p50": round(float(np.percentile(arr, 50)), 2),
            "p90": round(float(np.percentile(arr, 90)), 2), "max": round(float(arr.max()), 2)}


class FrameScorer:
    """Open-loop metrics over the frames that carry ground truth (the evaluation scorers)."""

    def __init__(self, tasks: tuple[str, ...]):
        self.scorers = {t: SCORERS[t]() for t in tasks if t in SCORERS}
        self.frames_with_truth = 0
        self.tic = time.perf_counter()

    def add(self, frame: BagFrame, texts: dict[str, tuple[str, float]]) -> float | None:
        """Score the raw answers `texts[task] = (text, seconds)`; the frame's mean L2 (m)
        when its plan parsed and it has a ground-truth future, else None."""
        truth = frame.truth
        if truth is None:
            return None
        self.frames_with_truth += 1
        size = (frame.rgb.shape[1], frame.rgb.shape[0]) if frame.rgb is not None else None
        l2 = None
        for task, (text, seconds) in texts.items():
            scorer = self.scorers.get(task)
            if scorer is None or not _has_truth(truth, task):
                continue
            before = len(getattr(scorer, "errors", []))
            scorer.add(truth.record(task), text, size, seconds)
            errors = getattr(scorer, "errors", [])
            if task == "planning" and len(errors) > before:
                l2 = float(np.mean(errors[-1]))
        return l2

    def report(self, info: dict) -> OpenLoopReport | None:
        """The open-loop report, or None when no frame had ground truth."""
        if not self.frames_with_truth:
            return None
        return OpenLoopReport(num_records=sum(s.num_records for s in self.scorers.values()),
                              seconds=time.perf_counter() - self.tic,
                              tasks={t: s.metrics() for t, s in self.scorers.items()},
                              info=info)


def _has_truth(truth, task: str) -> bool:
    if task == "planning":
        return truth.ego_future is not None
    if task == "detection":
        return "boxes" in truth.meta and "image_size" in truth.meta
    return False


# ------------------------------------------------------------------------------ messages
def _status_marker(header: Header, text: str, ok: bool) -> Marker:
    colour = ColorRGBA(r=0.1, g=0.9, b=0.3, a=1.0) if ok else ColorRGBA(r=1.0, g=0.2, b=0.2,
                                                                        a=1.0)
    m = Marker(header=header, ns="wamdiff2/status", id=0, type=Marker.TEXT_VIEW_FACING,
               action=Marker.ADD, color=colour, text=text)
    m.pose.position.z, m.pose.orientation.w, m.scale.z = 2.0, 1.0, 0.5
    return m


def _stats_msg(frame: BagFrame, pred: FramePrediction, header: Header, name: str
               ) -> DiagnosticArray:
    values = {"stamp": f"{frame.stamp_s:.9f}", "command": frame.command,
              "velocity": f"{frame.motion.velocity[0]:.3f},{frame.motion.velocity[1]:.3f}"}
    ok, message = True, "ok"
    for task, answer in (("planning", pred.plan), ("detection", pred.detect)):
        if answer is None:
            continue
        values.update(outputs.answer_stats_values(task, answer.ok, answer.ms, answer.stats,
                                                  answer.text))
        if not answer.ok:
            ok, message = False, f"{task} answer did not parse: {answer.reason}"
    return outputs.frame_stats_msg(header, f"{name}: frame", "bag eval", values, ok, message)


def frame_messages(frame: BagFrame, pred: FramePrediction, topics: OutputTopics
                   ) -> list[tuple[str, str, object]]:
    """(topic, type, rclpy message) of one frame's results, stamped with the image stamp."""
    stamp = frame.header.stamp
    header = Header(stamp=stamp, frame_id=BASE_FRAME)
    markers: list[Marker] = []
    out = []
    status = f"{frame.command} | no planning"
    ok = True
    if pred.plan is not None:
        ok = pred.plan.ok
        status = f"{frame.command} | {pred.plan.ms:.0f} ms" if ok else \
            "no plan: the answer did not parse"
        if pred.waypoints is not None:
            path = outputs.path_msg(pred.waypoints, stamp, BASE_FRAME)
            out.append((topics.path, TYPES["path"], path))
            markers += outputs.path_markers(path)
    if pred.detect is not None:
        height, width = frame.rgb.shape[:2]
        dets = pred.detections or []
        markers += outputs.detection_markers(dets, frame.header, width, height)
        doc = {"stamp_ns": frame.stamp_ns, "image_size": [width, height],
               "parsed": pred.detect.ok, "text": pred.detect.text,
               "detections": [{"box": [round(float(c), 2) for c in d.box], "label": d.label,
                               "score": d.score} for d in dets]}
        out.append((topics.detections, TYPES["string"], String(data=json.dumps(doc))))
    markers.append(_status_marker(header, status, ok))
    out.append((topics.markers, TYPES["markers"], outputs.marker_array(markers)))
    out.append((topics.stats, TYPES["diagnostics"], _stats_msg(frame, pred, header,
                                                                topics.node)))
    return out


# ------------------------------------------------------------------------------ the run
def _caption(frame: BagFrame, pred: FramePrediction, l2: float | None, t0_ns: int
             ) -> tuple[list[str], bool]:
    head = f"frame {frame.index}  t+{(frame.stamp_ns - t0_ns) * 1e-9:.2f}s  {frame.command}  " \
           f"v={frame.motion.velocity[0]:.1f} m/s"
    if pred.plan is None:
        return [head], True
    if not pred.plan.ok:
        return [f"PARSE FAILURE ({pred.plan.ms:.0f} ms): {pred.plan.text[:40]!r}", head], False
    line = f"plan {pred.plan.ms:.0f} ms, {pred.plan.stats.tokens_per_forward:.1f} tok/fwd"
    if l2 is not None:
        line += f", L2 {l2:.2f} m"
    return [line, head], True


def _check_outputs(cfg: EvalConfig) -> None:
    usable_path(cfg.bag)
    for path in (cfg.out, cfg.report, cfg.frames_dir):
        if path is not None and (usable_path(path, "output").exists() or path.is_symlink()):
            raise BagError(f"output {path} already exists; remove it or choose another path")
    if cfg.out.resolve() == cfg.bag.resolve():
        raise BagError("the output bag must differ from the input bag")


def _clean_partials(cfg: EvalConfig) -> None:
    """Remove what runs killed while writing these outputs left behind (with a note)."""
    for path in (cfg.out, cfg.report, cfg.frames_dir):
        for stale in remove_stale_partials(path) if path is not None else ():
            print(f"note: removed {stale}, left by an interrupted run", file=sys.stderr)


class EvalRun:
    """One evaluation in progress: answers each frame, writes its outputs, keeps the tally."""

    def __init__(self, cfg: EvalConfig, predictor, camera: tuple, start_ns: int,
                 writer: BagWriter, frames_dir: Path | None):
        self.cfg, self.predictor, self.writer, self.frames_dir = cfg, predictor, writer, \
            frames_dir
        self.camera_doc, self.camera_info = camera
        self.start_ns = start_ns
        self.out_topics = OutputTopics(cfg.output_node)
        self.scorer = FrameScorer(cfg.tasks)
        self.per_frame: list[dict] = []
        self.ms: dict[str, list[float]] = {"planning": [], "detection": []}
        self.tokens_per_forward: list[float] = []
        self.bad_frames = 0
        self.gap_frames = 0
        self.camera_source: str | None = None

    def add(self, frame: BagFrame) -> None:
        """Answer, write, score and draw one frame (count it if its image is unusable)."""
        if frame.rgb is None:
            self.bad_frames += 1
            self.per_frame.append({"index": frame.index, "stamp": frame.stamp_s,
                                   "bad_input": str(frame.bad_input)})
            return
        if frame.gaps:               # as the node: a camera without an image, no plan
            self.gap_frames += 1
            self.per_frame.append({"index": frame.index, "stamp": frame.stamp_s,
                                   "camera_gaps": [{"camera": g.camera, "kind": g.kind,
                                                    "reason": g.reason} for g in frame.gaps]})
            return
        pred = self.predictor.predict(frame, self.cfg.tasks)
        for topic, msgtype, msg in frame_messages(frame, pred, self.out_topics):
            self.writer.write(topic, msgtype, frame.log_ns, serialize_message(msg))
        texts = {}
        for task, answer in (("planning", pred.plan), ("detection", pred.detect)):
            if answer is not None:
                texts[task] = (answer.text, answer.ms / 1e3)
                self.ms[task].append(answer.ms)
        if pred.plan is not None and pred.plan.ok:
            self.tokens_per_forward.append(pred.plan.stats.tokens_per_forward)
        l2 = self.scorer.add(frame, texts)
        self.per_frame.append(_frame_entry(frame, pred, l2))
        if self.frames_dir is not None:
            self._draw(frame, pred, l2)

    def _draw(self, frame: BagFrame, pred: FramePrediction, l2: float | None) -> None:
        height, width = frame.rgb.shape[:2]
        model = CameraModel.from_bag(self.camera_doc, self.camera_info, width, height)
        self.camera_source = model.source
        lines, ok = _caption(frame, pred, l2, self.start_ns)
        truth = frame.truth.ego_future if frame.truth else None
        write_png(self.frames_dir / f"frame_{frame.index:04d}.png",
                  draw_overlay(frame.rgb, model, pred.waypoints, truth, lines, ok,
                               pred.detections))

    def report(self, topics: FrameTopics, seconds: float) -> dict:
        cfg = self.cfg
        info = {"checkpoint": self.predictor.name, "bag": str(cfg.bag),
                "decode": cfg.decode.to_dict(), "device": cfg.device}
        open_loop = self.scorer.report(info)
        return {
            "bag": str(cfg.bag), "output_bag": str(cfg.out),
            "frames_dir": str(cfg.frames_dir) if cfg.frames_dir else None,
            "checkpoint": self.predictor.name, "decode": cfg.decode.to_dict(),
            "tasks": list(cfg.tasks), "topics": topics.describe(),
            "camera_model": self.camera_source,
            "cameras": list(topics.cameras),
            "frames": len(self.per_frame), "frames_bad_input": self.bad_frames,
            "frames_camera_gaps": self.gap_frames,
            "frames_with_ground_truth": self.scorer.frames_with_truth,
            "planning": _task_summary(self.per_frame, "planning", self.ms["planning"],
                                      self.tokens_per_forward),
            "detection": _task_summary(self.per_frame, "detection", self.ms["detection"], []),
            "open_loop": open_loop.to_dict() if open_loop else None,
            "seconds": round(seconds, 2),
            "per_frame": self.per_frame,
        }


def run_eval(cfg: EvalConfig) -> dict:
    """Evaluate `cfg.bag`; returns the report (also written to `cfg.report`).

    Everything that can be wrong with the bag or the outputs is checked before the model
    loads; every output appears only complete (bag, then PNG folder, then report).
    """
    from tqdm import tqdm

    tic = time.perf_counter()
    _check_outputs(cfg)
    _clean_partials(cfg)
    with BagReader(cfg.bag) as bag:
        topics = FrameTopics.resolve(bag, cfg.camera_topic, cfg.odometry_topic,
                                     cfg.command_topic, gt_path=cfg.gt_topic,
                                     cameras=predictor_cameras(cfg.checkpoint),
                                     camera_topics=cfg.camera_topics)
        check_bag(bag, topics.names(), [topics.camera, *topics.others])
        camera = camera_document(bag, topics)
        predictor = load_predictor(cfg.checkpoint, cfg.decode, cfg.device)
        frames_tmp = staged_path(cfg.frames_dir) if cfg.frames_dir else None
        report_tmp = staged_path(cfg.report)
        total = bag.topics[topics.camera].count
        total = total if cfg.limit is None else min(total, cfg.limit)
        try:
            if frames_tmp is not None:
                remove_staged(frames_tmp)
                frames_tmp.mkdir(parents=True)
            with BagWriter(cfg.out) as writer, tqdm(
                    total=total, unit="frame", desc="bag eval", disable=not cfg.progress,
                    dynamic_ncols=True) as bar:
                run = EvalRun(cfg, predictor, camera, bag.start_ns, writer, frames_tmp)
                for frame in read_frames(bag, topics, cfg.default_command, False):
                    if frame.index >= total:
                        break
                    run.add(frame)
                    bar.update(1)
                report = run.report(topics, time.perf_counter() - tic)
                report_tmp.write_text(json.dumps(report, indent=1) + "\n")
            if frames_tmp is not None:            # the bag is in place: now frames, report
                publish_atomically(frames_tmp, cfg.frames_dir)
            publish_atomically(report_tmp, cfg.report)
        finally:
            if frames_tmp is not None:
                remove_staged(frames_tmp)
            remove_staged(report_tmp)
    return report


def _task_summary(per_frame: list[dict], task: str, ms: list[float], tpf: list[float]
                  ) -> dict | None:
    answers = [f[task] for f in per_frame if task in f]
    if not answers:
        return None
    failures = sum(not a["parsed"] for a in answers)
    out = {"frames": len(answers), "parsed": len(answers) - failures,
           "parse_failures": failures, "parse_failure_rate": failures / len(answers),
           "latency_ms": latency_summary(ms)}
    if tpf:
        out["tokens_per_forward"] = round(float(np.mean(tpf)), 3)
    return out


def _frame_entry(frame: BagFrame, pred: FramePrediction, l2: float | None) -> dict:
    entry: dict = {"index": frame.index, "stamp": round(frame.stamp_s, 9),
                   "command": frame.command,
                   "velocity": [round(v, 3) for v in frame.motion.velocity],
                   "has_ground_truth": frame.truth is not None}
    for task, answer in (("planning", pred.plan), ("detection", pred.detect)):
        if answer is not None:
            entry[task] = {"parsed": answer.ok, "ms": round(answer.ms, 2),
                           "tokens": answer.stats.tokens, "text": answer.text}
    if pred.waypoints is not None:
        entry["planning"]["waypoints"] = np.round(pred.waypoints, 3).tolist()
    if l2 is not None:
        entry["planning"]["l2_mean"] = round(l2, 4)
    if pred.detections is not None:
        entry["detection"]["count"] = len(pred.detections)
    return entry
