"""Open-loop evaluation: a model's raw answers on recorded samples, scored per task.

``evaluate_open_loop(records, predict, image_root)`` calls ``predict(record, image)`` once per
record (``image`` is the record's first image, an RGB ``PIL.Image``), parses the returned
text with the task's parser from ``wamdiff2_core.tasks`` and scores it (see ``scorers``).
A malformed answer is a parse failure of its task, never an exception; an exception raised
by ``predict`` itself, or a record without ground truth, is not hidden.
``score_predictions(records, items, image_root)`` scores a predictions file's answers
(``wamdiff2 predict``'s or the reference script's) the same way.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image
from tqdm.auto import tqdm

from wamdiff2_core.tasks import record_task

from .predictions import decode_seconds, scored_text
from .scorers import SCORERS, TaskScorer

Predict = Callable[[dict, "Image.Image | None"], str]

#: What the L2 keys mean; copied into every JSON report so a reader never has to guess.
L2_CONVENTIONS = {
    "l2_at_Ts": "L2 error (m) of the single waypoint at time T",
    "l2_avg_Ts": "mean L2 error (m) over all waypoints up to and including time T "
                 "(ST-P3/UniAD style)",
    "l2_per_waypoint": "mean L2 error (m) of each waypoint, t = 0.5, 1.0, ..., 4.0 s",
    "collision_rate": "share of parsed plans whose ego box overlaps another vehicle's box "
                      "at any waypoint (collision_rate_by_Ts: at any waypoint up to T)",
    "gt_*": "the same metric for the recorded expert trajectory (a floor for the model)",
}


@dataclass(frozen=True)
class OpenLoopReport:
    """Open-loop metrics per task (``tasks[name]`` as produced by that task's scorer).

    ``info`` is free provenance (checkpoint, data, decode settings) added by the caller.
    """

    num_records: int
    seconds: float
    tasks: dict[str, dict]
    skipped: dict[str, int] = field(default_factory=dict)   # unknown task name -> count
    info: dict = field(default_factory=dict)

    @property
    def parse_failure_rate(self) -> dict[str, float | None]:
        return {name: m["parse_failure_rate"] for name, m in self.tasks.items()}

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (``json.dumps`` works on it as is)."""
        return {
            "num_records": self.num_records,
            "seconds": round(self.seconds, 3),
            "parse_failure_rate": self.parse_failure_rate,
            **{name: dict(metrics) for name, metrics in self.tasks.items()},
            "skipped_tasks": dict(self.skipped),
            "conventions": dict(L2_CONVENTIONS),
            "info": dict(self.info),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)


def load_image(record: Mapping, image_root: str | os.PathLike) -> Image.Image | None:
    """The record's first image as RGB (paths relative to ``image_root``); None if it has none."""
    paths = record.get("image") or []
    if isinstance(paths, str):
        paths = [paths]
    if not paths:
        return None
    path = Path(paths[0])
    with Image.open(path if path.is_absolute() else Path(image_root) / path) as image:
        return image.convert("RGB")


class _Tally:
    """Every task's scorer, and the records no scorer takes."""

    def __init__(self) -> None:
        self.scorers: dict[str, TaskScorer] = {name: make() for name, make in SCORERS.items()}
        self.skipped: dict[str, int] = {}

    def scorer(self, record: Mapping) -> TaskScorer | None:
        """The scorer of the record's task (a reference record's task from its answer's
        format); None, counted as skipped, for a task without one."""
        task = record_task(record)
        scorer = self.scorers.get(task)
        if scorer is None:
            self.skipped[str(task)] = self.skipped.get(str(task), 0) + 1
        return scorer

    def report(self, num_records: int, start: float) -> OpenLoopReport:
        return OpenLoopReport(
            num_records=num_records, seconds=time.perf_counter() - start,
            tasks={name: scorer.metrics() for name, scorer in self.scorers.items()},
            skipped=self.skipped)


def evaluate_open_loop(records: Iterable[dict], predict: Predict,
                       image_root: str | os.PathLike, progress: bool = True) -> OpenLoopReport:
    """Score ``predict``'s raw answers on ``records`` (see the module docstring).

    A record's task is its ``"task"``, or for the reference repository's data the task its
    answer's format says (``tasks.record_task``). Records whose task has no scorer are
    counted in ``report.skipped`` and not predicted. Every task in ``SCORERS`` appears in the
    report, with ``None`` metrics if no record had that task.
    """
    records = list(records)
    tally, start = _Tally(), time.perf_counter()
    for record in tqdm(records, desc="open-loop eval", unit="record", disable=not progress):
        scorer = tally.scorer(record)
        if scorer is None:
            continue
        image = load_image(record, image_root)
        tic = time.perf_counter()
        text = predict(record, image)
        elapsed = time.perf_counter() - tic
        scorer.add(record, text, image.size if image is not None else None, elapsed)
    return tally.report(len(records), start)


def score_predictions(records: Sequence[dict], items: Sequence[Mapping],
                      image_root: str | os.PathLike) -> OpenLoopReport:
    """Score predictions-file objects (``predictions``: this project's or the reference
    script's), ``items[i]`` the answer to ``records[i]`` (``predictions.match``). A failed
    record (``error``) is a parse failure of its task; ``mean_predict_ms`` is each record's
    share of its batch's decode time, where the file records it. Images are opened only for
    a detection record that does not state its image size, and then only their headers."""
    tally, start = _Tally(), time.perf_counter()
    for record, item in zip(records, items, strict=True):
        scorer = tally.scorer(record)
        if scorer is None:
            continue
        size = None
        if scorer.task == "detection" and not (record.get("meta") or {}).get("image_size"):
            size = _image_size(record, image_root)
        scorer.add(record, scored_text(item), size, decode_seconds(item))
    return tally.report(len(records), start)


def _image_size(record: Mapping, image_root: str | os.PathLike) -> tuple[int, int] | None:
    paths = record.get("image") or []
    paths = [paths] if isinstance(paths, str) else paths
    if not paths:
        return None
    path = Path(paths[0])
    try:
        with Image.open(path if path.is_absolute() else Path(image_root) / path) as image:
            return image.size
    except OSError as exc:
        raise ValueError(f"record {record.get('id')!r}: cannot read the size of its image "
                         f"{path} ({exc})") from None


__all__ = ["L2_CONVENTIONS", "OpenLoopReport", "Predict", "evaluate_open_loop",
           "load_image", "score_predictions"]
