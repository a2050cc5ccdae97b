"""What answers each camera frame offline: the planner, or the recorded ground truth.

A predictor never raises on a malformed model answer: it returns the raw text with
`waypoints` (or `detections`) None, so the evaluation counts the parse failure and goes on.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from wamdiff2_core.decoding import DecodeConfig
from wamdiff2_core.evaluation.predictors import GROUND_TRUTH, TaskAnswer, timed_answer
from wamdiff2_core.tasks import DEFAULT_CAMERAS, Detection, format_detections, format_waypoints
from wamdiff2_core.types import Observation, bundled_checkpoint_path
from wamdiff2_ros.tools.bag_frames import BagFrame

FALLBACK_PRESET = "tiny"          # used (with a warning) when this checkout has no model


@dataclass
class FramePrediction:
    """The answers on one frame (None for tasks not run)."""

    plan: TaskAnswer | None = None
    waypoints: np.ndarray | None = None        # (8, 2) ego frame, when plan.ok
    detect: TaskAnswer | None = None
    detections: list[Detection] | None = None  # pixel boxes, when detect.ok


class PlannerPredictor:
    """A `wamdiff2_core.planner.Planner` answering planning and detection."""

    def __init__(self, planner, name: str):
        self.planner = planner
        self.name = name

    def predict(self, frame: BagFrame, tasks: tuple[str, ...]) -> FramePrediction:
        out = FramePrediction()
        if "planning" in tasks:
            obs = Observation(images=list(frame.images), command=frame.command,
                              velocity=frame.motion.velocity,
                              acceleration=frame.motion.acceleration, stamp=frame.stamp_s)
            out.plan = timed_answer(lambda: self.planner.plan(obs))
            out.waypoints = out.plan.result.waypoints if out.plan.ok else None
        if "detection" in tasks:
            out.detect = timed_answer(lambda: self.planner.detect(list(frame.images)))
            out.detections = out.detect.result.detections if out.detect.ok else None
        return out


class GroundTruthPredictor:
    """Answers with the bag's own ground truth (L2 0, AP 1): checks a bag and the metrics
    without a model. Frames without ground truth get unparseable empty answers."""

    name = GROUND_TRUTH

    def predict(self, frame: BagFrame, tasks: tuple[str, ...]) -> FramePrediction:
        out = FramePrediction()
        truth = frame.truth
        if "planning" in tasks:
            if truth is not None and truth.ego_future is not None:
                out.plan = TaskAnswer(format_waypoints(truth.ego_future), True, 0.0)
                out.waypoints = truth.ego_future
            else:
                out.plan = TaskAnswer("", False, 0.0, reason="no ground truth")
        if "detection" in tasks:
            boxes = (truth.meta.get("boxes") if truth is not None else None)
            if boxes is not None:
                out.detections = [Detection(box=tuple(b["bbox"]), label=b["label"])
                                  for b in boxes]
                height, width = frame.rgb.shape[:2]
                out.detect = TaskAnswer(format_detections(out.detections, width, height),
                                        True, 0.0)
            else:
                out.detect = TaskAnswer("", False, 0.0, reason="no ground truth")
        return out


def predictor_cameras(checkpoint: str | None) -> tuple[str, ...]:
    """The cameras the predictor of `--checkpoint` reads, without loading weights (the
    checkpoint's config.json; a preset or the ground truth: the front camera alone)."""
    from wamdiff2_core.model.checkpoint import read_cameras

    if checkpoint == GROUND_TRUTH:
        return DEFAULT_CAMERAS
    return read_cameras(checkpoint or bundled_checkpoint_path())


def load_predictor(checkpoint: str | None, decode: DecodeConfig, device: str = "cpu"):
    """The predictor for `--checkpoint`: None = the bundled model (the `tiny` preset, with a
    warning, where this checkout has none), GROUND_TRUTH = the oracle, else a directory or
    preset. Loading errors propagate (CheckpointError names the problem)."""
    from wamdiff2_core.planner import Planner, PlannerConfig  # torch loads here

    if checkpoint == GROUND_TRUTH:
        return GroundTruthPredictor()
    name = checkpoint
    if checkpoint is None:
        bundled = bundled_checkpoint_path()
        if bundled is None:
            print(f"warning: this checkout has no bundled model; using the untrained "
                  f"'{FALLBACK_PRESET}' preset (expect parse failures)", file=sys.stderr)
            name = FALLBACK_PRESET
        else:
            name = str(bundled)
    planner = Planner.from_pretrained(name, PlannerConfig(decode), device=device)
    planner.warmup()
    return PlannerPredictor(planner, "bundled" if checkpoint is None and name != FALLBACK_PRESET
                            else name)
