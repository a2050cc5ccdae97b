"""Per-task scorers for open-loop evaluation: parse a raw answer, compare, accumulate.

One scorer per task name (``SCORERS``). A scorer never raises on a model's answer: an
``AnswerParseError`` is counted as a parse failure of that task, and what a failure costs is
task-specific (documented on each scorer). Ground truth comes from the record's ``meta``
(the generated data set); where ``meta`` lacks it, from the record's own answer turn, so
reference-format records can be scored too (without collisions: they carry no other
vehicles).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import numpy as np

from wamdiff2_core.tasks import (
    AnswerParseError, parse_answer, parse_detections, parse_model_detections, parse_waypoints,
    record_prompt_and_answer)

from .collision import plan_collisions
from .detection_map import detection_map
from .intervals import interval_pair
from .l2 import HORIZONS_S, WAYPOINT_DT_S, l2_horizons, l2_per_waypoint, waypoint_index
from .qa import exact_match, in_answer_set


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def _reference_answer(record: Mapping) -> str:
    answer = record_prompt_and_answer(record)[1]
    if answer is None:
        raise ValueError(f"record {record.get('id')!r} has no ground truth (no meta and no "
                         f"answer turn)")
    return answer


class TaskScorer:
    """Accumulates one task's results; subclasses define ``score`` and ``metrics``."""

    task = ""

    def __init__(self) -> None:
        self.num_records = 0
        self.num_parse_failures = 0
        self.predict_seconds = 0.0
        self.failed: list[bool] = []            # per scored record: its answer did not parse

    def add(self, record: Mapping, text: str, image_size: tuple[int, int] | None,
            predict_seconds: float = 0.0) -> None:
        """Score one record's raw answer ``text``; ``image_size`` is ``(width, height)``."""
        self.num_records += 1
        self.predict_seconds += predict_seconds
        failures = self.num_parse_failures
        self.score(record, text, image_size)
        self.failed.append(self.num_parse_failures > failures)

    def score(self, record: Mapping, text: str, image_size: tuple[int, int] | None) -> None:
        raise NotImplementedError

    def metrics(self) -> dict:
        """JSON-serialisable metrics; values are ``None`` where undefined (no records)."""
        return {
            "num_records": self.num_records,
            "num_parse_failures": self.num_parse_failures,
            "parse_failure_rate": _rate(self.num_parse_failures, self.num_records),
            "mean_predict_ms": (1000.0 * self.predict_seconds / self.num_records
                                if self.num_records else None),
            "intervals": {"parse_failure_rate": interval_pair(self.failed)},
        }


class PlanningScorer(TaskScorer):
    """L2 and collisions of the 8 planned waypoints.

    A parse failure has no trajectory: L2 and collision rates are over parsed plans only
    (``num_parsed`` of them); read them together with ``parse_failure_rate``.
    """

    task = "planning"

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[np.ndarray] = []          # (8,) per parsed plan
        self.collisions: list[np.ndarray] = []      # (8,) bool per parsed plan with others
        self.gt_collisions: list[np.ndarray] = []   # the same for the expert's trajectory

    def score(self, record: Mapping, text: str, image_size: tuple[int, int] | None) -> None:
        meta = record.get("meta", {})
        if "ego_future" in meta:
            gt = np.asarray(meta["ego_future"], dtype=np.float64)   # (8, 2)
        else:
            gt = parse_waypoints(_reference_answer(record))
        try:
            plan = parse_waypoints(text)                            # (8, 2)
        except AnswerParseError:
            self.num_parse_failures += 1
            return
        self.errors.append(l2_per_waypoint(plan, gt))
        if "others_future" in meta and "ego_size" in meta:
            self.collisions.append(plan_collisions(plan, meta["ego_size"], meta["others_future"]))
            self.gt_collisions.append(
                plan_collisions(gt, meta["ego_size"], meta["others_future"]))

    def metrics(self) -> dict:
        out = super().metrics()
        out["num_parsed"] = len(self.errors)
        curve = np.mean(self.errors, axis=0) if self.errors else None           # (8,)
        out["waypoint_times_s"] = [WAYPOINT_DT_S * (i + 1) for i in range(
            curve.shape[0] if curve is not None else 8)]
        out["l2_per_waypoint"] = curve.tolist() if curve is not None else None
        horizons = l2_horizons(curve) if curve is not None else {
            f"l2_{kind}_{h:g}s": None for h in HORIZONS_S for kind in ("at", "avg")}
        out.update(horizons)
        out["l2_mean"] = float(curve.mean()) if curve is not None else None
        out["num_with_others"] = len(self.collisions)
        out.update(self._collision_metrics(self.collisions, ""))
        out.update(self._collision_metrics(self.gt_collisions, "gt_"))
        out["intervals"].update(self._intervals())
        return out

    def _intervals(self) -> dict:
        """95% bootstrap intervals over plans of the L2 and collision means (None with
        fewer than two plans); ``l2_per_waypoint``: one [low, high] per waypoint."""
        errors = np.array(self.errors) if self.errors else np.zeros((0, 8))  # (plans, 8)
        out = {"l2_per_waypoint": [interval_pair(errors[:, k])
                                   for k in range(errors.shape[1])] if len(errors) else None,
               "l2_mean": interval_pair(errors.mean(axis=1))}
        for h in HORIZONS_S:
            upto = waypoint_index(h) + 1
            out[f"l2_at_{h:g}s"] = interval_pair(errors[:, upto - 1])
            out[f"l2_avg_{h:g}s"] = interval_pair(errors[:, :upto].mean(axis=1))
        hits = np.array(self.collisions, dtype=bool) if self.collisions else \
            np.zeros((0, 8), dtype=bool)
        out["collision_rate"] = interval_pair(hits.any(axis=1))
        for h in HORIZONS_S:
            out[f"collision_rate_by_{h:g}s"] = interval_pair(
                hits[:, :waypoint_index(h) + 1].any(axis=1))
        return out

    @staticmethod
    def _collision_metrics(hits: list[np.ndarray], prefix: str) -> dict:
        if not hits:
            out = {f"{prefix}collision_rate": None,
                   f"{prefix}collision_rate_per_waypoint": None}
            out.update({f"{prefix}collision_rate_by_{h:g}s": None for h in HORIZONS_S})
            return out
        table = np.stack(hits)                                   # (plans, 8) bool
        out = {f"{prefix}collision_rate": float(table.any(axis=1).mean()),
               f"{prefix}collision_rate_per_waypoint": table.mean(axis=0).tolist()}
        for h in HORIZONS_S:
            upto = waypoint_index(h) + 1
            out[f"{prefix}collision_rate_by_{h:g}s"] = float(table[:, :upto].any(axis=1).mean())
        return out


class DetectionScorer(TaskScorer):
    """COCO mAP@[.5:.95] and AP50 over all detection records.

    A parse failure counts as an image with no detections: its ground-truth boxes are missed.
    """

    task = "detection"

    def __init__(self) -> None:
        super().__init__()
        self.ground_truth: list[list[dict]] = []
        self.predictions: list[list] = []
        self.sizes: list[tuple[int, int]] = []
        self.num_dropped_boxes = 0

    def score(self, record: Mapping, text: str, image_size: tuple[int, int] | None) -> None:
        meta = record.get("meta", {})
        width, height = meta.get("image_size") or image_size or (None, None)
        if width is None:
            raise ValueError(f"record {record.get('id')!r}: no image size for detection")
        if "boxes" in meta:
            gt = [{"bbox": b["bbox"], "label": b["label"]} for b in meta["boxes"]]
        else:
            gt = [{"bbox": d.box, "label": d.label}
                  for d in parse_detections(_reference_answer(record), width, height)]
        try:    # as Planner.detect reads it: a box with its corners out of order is dropped
            preds, dropped = parse_model_detections(text, width, height)
            self.num_dropped_boxes += dropped
        except AnswerParseError:
            self.num_parse_failures += 1
            preds = []
        self.ground_truth.append(gt)
        self.predictions.append(preds)
        self.sizes.append((int(width), int(height)))

    def metrics(self) -> dict:
        out = super().metrics()
        out.update(detection_map(self.ground_truth, self.predictions, self.sizes).to_dict())
        out["dropped_boxes"] = self.num_dropped_boxes
        return out


class QAScorer(TaskScorer):
    """Exact-match accuracy after normalisation; a parse failure (empty answer) is wrong."""

    task = "qa"

    def __init__(self) -> None:
        super().__init__()
        self.num_correct = 0
        self.num_in_set = 0
        self.num_with_set = 0
        self.correct: list[bool] = []           # per record

    def score(self, record: Mapping, text: str, image_size: tuple[int, int] | None) -> None:
        meta = record.get("meta", {})
        answer = meta["answer"] if "answer" in meta else _reference_answer(record)
        try:
            prediction = parse_answer(text)
        except AnswerParseError:
            self.num_parse_failures += 1
            prediction = None
        if "answer_set" in meta:
            self.num_with_set += 1
            self.num_in_set += prediction is not None and in_answer_set(prediction,
                                                                        meta["answer_set"])
        right = prediction is not None and exact_match(prediction, answer)
        self.num_correct += right
        self.correct.append(bool(right))

    def metrics(self) -> dict:
        out = super().metrics()
        out["num_correct"] = self.num_correct
        out["accuracy"] = _rate(self.num_correct, self.num_records)
        out["in_answer_set_rate"] = _rate(self.num_in_set, self.num_with_set)
        out["intervals"]["accuracy"] = interval_pair(self.correct)
        return out


#: task name (a record's "task") -> scorer factory
SCORERS: dict[str, Callable[[], TaskScorer]] = {
    PlanningScorer.task: PlanningScorer,
    DetectionScorer.task: DetectionScorer,
    QAScorer.task: QAScorer,
}
