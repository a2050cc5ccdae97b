"""Open-loop evaluation: a model's raw answers on recorded samples, scored per task.

``evaluate_open_loop(records, predict, image_root)`` calls ``predict(record, image)`` once per
record (``image`` is the record's first image, an RGB ``PIL.Image``), parses the returned
text with the task's parser from ``wamdiff2_core.tasks`` and scores it (see ``scorers``).
A malformed answer is a parse failure of its task, never an exception; an exception raised
by ``predict`` itself, or a record without ground truth, is not hidden.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image
from tqdm.auto import tqdm

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


def evaluate_open_loop(records: Iterable[dict], predict: Predict,
                       image_root: str | os.PathLike, progress: bool = True) -> OpenLoopReport:
    """Score ``predict``'s raw answers on ``records`` (see the module docstring).

    Records whose ``"task"`` has no scorer are counted in ``report.skipped`` and not
    predicted. Every task in ``SCORERS`` appears in the report, with ``None`` metrics if no
    record had that task.
    """
    records = list(records)
    scorers: dict[str, TaskScorer] = {name: make() for name, make in SCORERS.items()}
    skipped: dict[str, int] = {}
    start = time.perf_counter()
    for record in tqdm(records, desc="open-loop eval", unit="record", disable=not progress):
        task = record.get("task")
        scorer = scorers.get(task)
        if scorer is None:
            skipped[str(task)] = skipped.get(str(task), 0) + 1
            continue
        image = load_image(record, image_root)
        tic = time.perf_counter()
        text = predict(record, image)
        elapsed = time.perf_counter() - tic
        scorer.add(record, text, image.size if image is not None else None, elapsed)
    return OpenLoopReport(
        num_records=len(records), seconds=time.perf_counter() - start,
        tasks={name: scorer.metrics() for name, scorer in scorers.items()}, skipped=skipped)


__all__ = ["L2_CONVENTIONS", "OpenLoopReport", "Predict", "evaluate_open_loop",
           "load_image"]
