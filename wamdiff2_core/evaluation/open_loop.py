"""Open-loop evaluation: a model's raw answers on recorded samples, scored per task.

``evaluate_open_loop(records, predict, image_root)`` calls ``predict(record, image)`` once per
record (``image`` is the record's first image, an RGB ``PIL.Image``), parses the returned
text with the task's parser from ``wamdiff2_core.tasks`` and scores it (see ``scorers``).
``score_predictions(records, items, image_root)`` scores a predictions file's answers
(``wamdiff2 predict``'s or the reference script's) the same way; ``records`` may be the input
records or, where there are none, what the items say of them (``predictions.item_record``).

A malformed answer is a parse failure of its task, never an exception. A record that fails
(its prediction carries an ``error``; or it cannot be scored: malformed, a ground truth its
task's parser refuses, an image whose size cannot be read) is counted in the report's
``failures`` under its task (``unknown`` where the task cannot be told) and the rest go on;
a failed record that has a ground truth is also a parse failure of its task. An exception
raised by ``predict`` itself is not hidden.
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

from wamdiff2_core.image_files import ImageFileError, image_size, open_rgb

from .predictions import decode_seconds, item_error
from .requests import MAX_RECORD_CHARS
from .scorers import SCORERS, TaskScorer
from .truth import UNKNOWN, Unscorable, record_truth, scoring_record

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
    failures: dict[str, int] = field(default_factory=dict)  # task (or "unknown") -> count
    first_failure: str | None = None                         # which record, and why

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
            "failures": dict(self.failures),
            "first_failure": self.first_failure,
            "conventions": dict(L2_CONVENTIONS),
            "info": dict(self.info),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)


def load_image(record: Mapping, image_root: str | os.PathLike) -> Image.Image | None:
    """The record's first image as RGB (paths relative to ``image_root``); None if it has
    none. ImageFileError (a ValueError), one sentence, when it cannot be read."""
    path = _first_image(record)
    if path is None:
        return None
    return open_rgb(path if path.is_absolute() else Path(image_root) / path)


def _first_image(record: Mapping) -> Path | None:
    """The record's first image path as written; None without one; Unscorable when its
    ``image`` is not a path or a list of paths (a number, a dict)."""
    paths = record.get("image") or []
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise Unscorable(f"its image is a JSON {type(paths).__name__}, not a path or a list "
                         f"of paths" if not isinstance(paths, list)
                         else "its image list holds something other than paths")
    return Path(paths[0]) if paths else None


class _Tally:
    """Every task's scorer, the records no scorer takes, and the failures."""

    def __init__(self) -> None:
        self.scorers: dict[str, TaskScorer] = {name: make() for name, make in SCORERS.items()}
        self.skipped: dict[str, int] = {}
        self.failures: dict[str, int] = {name: 0 for name in SCORERS}
        self.first_failure: str | None = None

    def skip(self, key: str) -> None:
        self.skipped[key] = self.skipped.get(key, 0) + 1

    def fail(self, task: str | None, rid: object, reason: str) -> None:
        """Count a failed record under its task (``unknown`` where it cannot be told)."""
        task = task if task in self.scorers else UNKNOWN
        self.failures[task] = self.failures.get(task, 0) + 1
        if self.first_failure is None:
            self.first_failure = f"record {rid!r}: {reason}"

    def add(self, record: Mapping, task: str, text: str, size, seconds: float,
            rid: object) -> bool:
        """Score one answer; a record its scorer cannot take (a malformed meta) is a
        failure, and the scorer's counts are left as they were. False then."""
        scorer = self.scorers[task]
        before = (scorer.num_records, scorer.num_parse_failures, scorer.predict_seconds)
        try:
            scorer.add(record, text, size, seconds)
            return True
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            scorer.num_records, scorer.num_parse_failures, scorer.predict_seconds = before
            self.fail(task, rid, f"cannot be scored: {exc}")
            return False

    def report(self, num_records: int, start: float) -> OpenLoopReport:
        return OpenLoopReport(
            num_records=num_records, seconds=time.perf_counter() - start,
            tasks={name: scorer.metrics() for name, scorer in self.scorers.items()},
            skipped=self.skipped, failures=self.failures, first_failure=self.first_failure)


def evaluate_open_loop(records: Iterable[dict], predict: Predict,
                       image_root: str | os.PathLike, progress: bool = True) -> OpenLoopReport:
    """Score ``predict``'s raw answers on ``records`` (see the module docstring).

    A record's task is its ``"task"``, or for the reference repository's data the task its
    answer's format says (``tasks.record_task``). Records whose task has no scorer, or that
    have no ground truth, are counted in ``report.skipped`` and not predicted; a malformed
    record or an unreadable image is a failure (``report.failures``). Every task in
    ``SCORERS`` appears in the report, with ``None`` metrics if no record had that task.
    """
    records = list(records)
    tally, start = _Tally(), time.perf_counter()
    for i, record in enumerate(tqdm(records, desc="open-loop eval", unit="record",
                                    disable=not progress)):
        rid = record.get("id", i) if isinstance(record, Mapping) else i
        task = None
        try:
            task, answer = record_truth(record)
            if task not in tally.scorers or answer is None and not _meta_truth(record, task):
                tally.skip(str(task) if task not in tally.scorers else "no ground truth")
                continue
            image = load_image(record, image_root)
            size = image.size if image is not None else None
            scored = scoring_record(record, task, answer, size)
        except (Unscorable, ValueError) as exc:          # ImageFileError too
            tally.fail(getattr(exc, "task", None) or task, rid, str(exc))
            continue
        tic = time.perf_counter()
        text = predict(record, image)
        tally.add(scored, task, text, size, time.perf_counter() - tic, rid)
    return tally.report(len(records), start)


def _meta_truth(record: Mapping, task: str) -> bool:
    """Whether the record's ``meta`` holds its task's ground truth (generated data)."""
    meta = record.get("meta")
    key = {"planning": "ego_future", "detection": "boxes", "qa": "answer"}.get(task)
    return isinstance(meta, Mapping) and key in meta


def score_predictions(records: Sequence, items: Sequence[Mapping],
                      image_root: str | os.PathLike) -> OpenLoopReport:
    """Score predictions-file objects (``predictions``: this project's or the reference
    script's), ``items[i]`` the answer to ``records[i]`` (``predictions.match``; a record
    built by ``predictions.item_record`` where there is no input). A failed record
    (``error``) is a failure of its task and, where it has a ground truth, a parse failure
    too; ``mean_predict_ms`` is each record's share of its batch's decode time, where the
    file records it. Images are opened only for a detection record whose size neither the
    record nor the item states, and then only their headers."""
    tally, start = _Tally(), time.perf_counter()
    for i, (record, item) in enumerate(zip(records, items, strict=True)):
        _score_item(tally, record, item, image_root, i)
    return tally.report(len(records), start)


def _score_item(tally: _Tally, record, item: Mapping, image_root, position: int) -> None:
    rid = record.get("id", position) if isinstance(record, Mapping) else position
    error, task = item_error(item), None
    text = "" if error else item.get("prediction", "")
    if len(text) > MAX_RECORD_CHARS:
        error, text = (f"its prediction is {len(text):,} characters long, more than the "
                       f"limit of {MAX_RECORD_CHARS:,}"), ""
    try:
        task, answer = record_truth(record)
        if task not in tally.scorers:
            if error:
                tally.fail(task, rid, error)
            else:
                tally.skip(str(task))
            return
        if answer is None and not _meta_truth(record, task):
            if error:
                tally.fail(task, rid, error)
            else:
                tally.skip("no ground truth")
            return
        size = _size(record, item, image_root) if task == "detection" else None
        scored = scoring_record(record, task, answer, size)
    except (Unscorable, ValueError) as exc:
        tally.fail(getattr(exc, "task", None) or task, rid,
                   error or f"cannot be scored: {exc}")
        return
    if tally.add(scored, task, text, size, decode_seconds(item), rid) and error:
        tally.fail(task, rid, error)


def _size(record: Mapping, item: Mapping, image_root) -> tuple[int, int] | None:
    """The first image's (width, height): stated by the record or the item, else read from
    the image's header; None when the record's meta states it (the scorer reads it)."""
    meta = record.get("meta")
    if isinstance(meta, Mapping) and meta.get("image_size"):
        return None
    own = item.get("wamdiff2")
    stated = own.get("image_size") if isinstance(own, Mapping) else None
    if (isinstance(stated, list) and len(stated) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in stated)):
        return stated[0], stated[1]
    path = _first_image(record)
    if path is None:
        raise Unscorable("it has no image, and no image size to score boxes in", "detection")
    try:
        return image_size(path if path.is_absolute() else Path(image_root) / path)
    except ImageFileError as exc:
        raise Unscorable(f"{exc} (its size is needed to score boxes)", "detection") from None


__all__ = ["L2_CONVENTIONS", "OpenLoopReport", "Predict", "evaluate_open_loop",
           "load_image", "score_predictions"]
