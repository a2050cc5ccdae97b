"""Detection mAP@[.5:.95] and AP50 with faster-coco-eval (the COCO protocol, bbox IoU).

COCO rules apply unchanged: 101-point interpolated precision, at most 100 detections per
image (highest score first), area range "all", AP averaged over categories that have at
least one ground-truth box. Categories are the union of ground-truth and predicted labels,
so a prediction with a label that never occurs in the ground truth is a false positive that
no category's AP sees (as in COCO).

Empty cases, by design never an exception:

- no images, or no ground-truth box in any image: AP is undefined and reported as ``None``
  (COCO itself returns -1 there);
- ground-truth boxes but no prediction at all: AP is 0.0.

``by_area`` breaks AP50 and recall at IoU 0.5 down by ground-truth box area (COCO's
per-area evaluation: a box outside the range is ignored, not a miss or a false positive).
The ranges are COCO's small / medium / large with "small" split at one ViT patch (16 x 16
pixels), because most boxes of this project's camera are that small; a range without
ground truth reports ``None``.
"""
from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

# (name, min area, max area) in pixels^2: COCO's ranges, "small" split at one 16 x 16 patch
AREA_RANGES: tuple[tuple[str, float, float], ...] = (
    ("<16^2", 0.0, 16.0 ** 2), ("16^2-32^2", 16.0 ** 2, 32.0 ** 2),
    ("32^2-96^2", 32.0 ** 2, 96.0 ** 2), (">=96^2", 96.0 ** 2, 1e5 ** 2))


class BoxPrediction(Protocol):
    """What a predicted box must provide (``wamdiff2_core.tasks.Detection`` does)."""

    box: tuple[float, float, float, float]     # x1, y1, x2, y2 in pixels
    label: str
    score: float


@dataclass(frozen=True)
class DetectionScore:
    """COCO box AP over a set of images; ``None`` where undefined (no ground truth)."""

    map: float | None          # mean AP over IoU 0.50:0.05:0.95
    ap50: float | None         # AP at IoU 0.50
    num_images: int
    num_gt: int
    num_pred: int
    # {range name: {"num_gt", "ap50", "recall50"}} for AREA_RANGES; None where no box is in it
    by_area: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _xywh(box: Sequence[float]) -> list[float]:
    x1, y1, x2, y2 = (float(v) for v in box)
    return [x1, y1, x2 - x1, y2 - y1]


def _area(box: Sequence[float]) -> float:
    _, _, w, h = _xywh(box)
    return max(w, 0.0) * max(h, 0.0)


def _gt_per_area(ground_truth: Sequence[Sequence[Mapping]]) -> dict[str, int]:
    """Ground-truth boxes per AREA_RANGES entry, counted as COCO bins them (lo <= a <= hi)."""
    areas = [_area(b["bbox"]) for boxes in ground_truth for b in boxes]
    return {name: sum(lo <= a <= hi for a in areas) for name, lo, hi in AREA_RANGES}


def _undefined_or_zero(ground_truth: Sequence[Sequence[Mapping]], num_gt: int,
                       num_pred: int) -> DetectionScore | None:
    num_images = len(ground_truth)
    if num_images == 0 or num_gt == 0:
        return DetectionScore(None, None, num_images, num_gt, num_pred)
    if num_pred == 0:
        by_area = {name: {"num_gt": n, "ap50": 0.0 if n else None, "recall50": 0.0 if n else None}
                   for name, n in _gt_per_area(ground_truth).items()}
        return DetectionScore(0.0, 0.0, num_images, num_gt, num_pred, by_area)
    return None


def _per_area(evaluator, gt_counts: dict[str, int]) -> dict:
    """AP50 and recall at IoU 0.5, at 100 boxes per image, for each AREA_RANGES entry (the
    evaluator's ranges after "all"), as COCO's summarize averages them over categories."""
    precision = evaluator.eval["precision"]          # [IoU, recall pt, category, area, maxDets]
    recall = evaluator.eval["recall"]                # [IoU, category, area, maxDets]
    out = {}
    for index, (name, _, _) in enumerate(AREA_RANGES, start=1):
        p = precision[0, :, :, index, -1]
        r = recall[0, :, index, -1]
        defined = gt_counts[name] > 0 and (p > -1).any()
        out[name] = {"num_gt": gt_counts[name],
                     "ap50": float(p[p > -1].mean()) if defined else None,
                     "recall50": float(r[r > -1].mean()) if defined else None}
    return out


def detection_map(ground_truth: Sequence[Sequence[Mapping]],
                  predictions: Sequence[Sequence[BoxPrediction]],
                  image_sizes: Sequence[Sequence[int]] | None = None) -> DetectionScore:
    """COCO mAP@[.5:.95] and AP50 of ``predictions`` against ``ground_truth``.

    Both are lists with one entry per image: ``ground_truth[i]`` holds
    ``{"bbox": [x1, y1, x2, y2], "label": str}`` dicts (the data set's ``meta.boxes``),
    ``predictions[i]`` objects with ``box``, ``label`` and ``score``. ``image_sizes[i]`` is
    ``(width, height)`` (only recorded in the COCO image entries). See the module docstring
    for the empty cases.
    """
    if len(ground_truth) != len(predictions):
        raise ValueError(f"{len(ground_truth)} ground-truth images but "
                         f"{len(predictions)} prediction lists")
    num_gt = sum(len(boxes) for boxes in ground_truth)
    num_pred = sum(len(dets) for dets in predictions)
    early = _undefined_or_zero(ground_truth, num_gt, num_pred)
    if early is not None:
        return early

    labels = sorted({str(b["label"]) for boxes in ground_truth for b in boxes}
                    | {str(d.label) for dets in predictions for d in dets})
    category = {label: i + 1 for i, label in enumerate(labels)}
    sizes = image_sizes or [(0, 0)] * len(ground_truth)
    images, annotations, results = [], [], []
    for image_id, (boxes, dets, (width, height)) in enumerate(
            zip(ground_truth, predictions, sizes), start=1):
        images.append({"id": image_id, "width": int(width), "height": int(height)})
        for box in boxes:
            xywh = _xywh(box["bbox"])
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": category[str(box["label"])], "bbox": xywh,
                                "area": _area(box["bbox"]),
                                "iscrowd": 0})
        for det in dets:
            results.append({"image_id": image_id, "category_id": category[str(det.label)],
                            "bbox": _xywh(det.box), "score": float(det.score)})

    from faster_coco_eval import COCO, COCOeval_faster   # imported here: optional extra

    with contextlib.redirect_stdout(io.StringIO()):      # the library prints progress
        gt = COCO({"images": images, "annotations": annotations,
                   "categories": [{"id": i, "name": n} for n, i in category.items()]})
        evaluator = COCOeval_faster(gt, gt.loadRes(results), "bbox",
                                    ranges={n: [lo, hi] for n, lo, hi in AREA_RANGES},
                                    print_function=lambda *_: None)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = evaluator.stats                              # [AP, AP50, AP75, ...]
    return DetectionScore(
        map=float(stats[0]) if stats[0] >= 0 else None,
        ap50=float(stats[1]) if stats[1] >= 0 else None,
        num_images=len(ground_truth), num_gt=num_gt, num_pred=num_pred,
        by_area=_per_area(evaluator, _gt_per_area(ground_truth)))
