"""Predictions files in the reference repository's format (``wam_diff.inference.gpu``).

One JSON object per input record, in a JSON list::

    {"id": "43ebecce459052f2", "datasource": "navsim", "image": ["CAM_F0.jpg"],
     "question": "Here is a front-view images ... <image>\\n...",
     "prediction": "2.26,-0.17,...", "ground_truth": "2.31,-0.12,...",
     "error": "..."}                                   # only where the record failed

Keys and values as the reference script writes them: ``id`` and ``image`` copied from the
record, ``datasource`` the record's or ``"navsim"``, ``question`` the first turn's text,
``prediction`` the answer stripped, ``ground_truth`` the first gpt turn's text or ``""``;
a failed record has ``prediction`` ``""`` and an ``error``. What this project adds lives under
one key of its own, ``wamdiff2`` (a tool written for the reference's output never sees it):
``index`` (position in the input), ``task``, ``image_size`` (of the first image),
``tokens``, ``forwards``, ``decode_ms`` and ``batch_size`` of the batch the record was
decoded in, ``parsed`` (waypoints, boxes or the answer) or ``parse_error``, and ``raw_text``
where an error replaced the prediction.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wamdiff2_core.tasks import read_records

OWN_KEY = "wamdiff2"                  # this project's per-record additions
REFERENCE_KEYS = ("id", "datasource", "image", "question", "prediction", "ground_truth")
DEFAULT_DATASOURCE = "navsim"         # what the reference script writes for a record without one


def _turns(record: Any) -> list:
    turns = record.get("conversations") if isinstance(record, Mapping) else None
    return [t for t in turns if isinstance(t, Mapping)] if isinstance(turns, list) else []


def prediction_item(record: Any, index: int, prediction: str, error: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> dict:
    """The predictions-file object of input record ``index`` (``record`` may be malformed:
    what it lacks is written as the reference writes a missing key). ``error``: why the
    record has no prediction (``prediction`` is then ``""``); ``extra``: this project's
    additions, stored under ``wamdiff2`` with ``index``."""
    record = record if isinstance(record, Mapping) else {}
    turns = _turns(record)
    gpt = [t.get("value") for t in turns if t.get("from") == "gpt"]
    item = {"id": record.get("id", index),
            "datasource": record.get("datasource", DEFAULT_DATASOURCE),
            "image": record.get("image", []),
            "question": turns[0].get("value", "") if turns else "",
            "prediction": "" if error is not None else prediction.strip(),
            "ground_truth": gpt[0] if gpt and isinstance(gpt[0], str) else ""}
    if error is not None:
        item["error"] = error
    item[OWN_KEY] = {"index": index, **(extra or {})}
    return item


def item_index(item: Mapping) -> int | None:
    """The input position this project recorded for a predictions-file object, if any."""
    own = item.get(OWN_KEY)
    index = own.get("index") if isinstance(own, Mapping) else None
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def dumps_predictions(items: Sequence[Mapping], path: str | os.PathLike) -> bytes:
    """The bytes of a predictions file: a JSON list indented as the reference writes it, or
    for a ``.jsonl`` path one object per line."""
    if Path(path).suffix == ".jsonl":
        text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
    else:
        text = json.dumps(list(items), indent=4, ensure_ascii=False) + "\n"
    return text.encode("utf-8")


def read_predictions(path: str | os.PathLike) -> list[dict]:
    """The objects of a predictions file (JSON list or JSONL), ours or the reference's.
    ValueError, one sentence naming the file, when it is not one."""
    if not Path(path).is_file():
        raise ValueError(f"no predictions file at {path}")
    items = read_records(path)                 # the same JSON / JSONL rules as records files
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"{path}: entry {i} is a JSON {type(item).__name__}, not a "
                             f"prediction object")
        missing = [k for k in ("id", "prediction") if k not in item]
        if missing or not isinstance(item["prediction"], str):
            raise ValueError(f"{path}: entry {i} is not a prediction (it needs a str "
                             f"'prediction' and an 'id'; missing: {', '.join(missing) or 'none'})")
    return items


def record_of(item: Mapping) -> dict:
    """A conversation record rebuilt from a predictions-file object (its question, its
    ground truth as the answer turn when there is one, its images and, where this project
    wrote it, its task), so that a predictions file can be scored without its input file.
    A reference-made failed record has no ground truth and so no task."""
    record = {"id": item.get("id"), "image": item.get("image", []),
              "conversations": [{"from": "human", "value": item.get("question", "")}]}
    if item.get("ground_truth"):
        record["conversations"].append({"from": "gpt", "value": item["ground_truth"]})
    own = item.get(OWN_KEY)
    if isinstance(own, Mapping) and isinstance(own.get("task"), str):
        record["task"] = own["task"]
    if isinstance(own, Mapping) and isinstance(own.get("image_size"), list):
        record["meta"] = {"image_size": own["image_size"]}      # boxes scored without images
    return record


def scored_text(item: Mapping) -> str:
    """The answer a predictions-file object is scored by: its prediction, or ``""`` (a
    parse failure of its task) when the record failed."""
    return "" if item.get("error") else str(item.get("prediction", ""))


def decode_seconds(item: Mapping) -> float:
    """The record's share of its batch's decode time, where this project recorded it (s)."""
    own = item.get(OWN_KEY)
    if not isinstance(own, Mapping) or not isinstance(own.get("decode_ms"), (int, float)):
        return 0.0
    return own["decode_ms"] / 1e3 / max(1, int(own.get("batch_size") or 1))


def match(records: Sequence[Mapping], items: Sequence[Mapping], source: str) -> list[Mapping]:
    """The predictions-file object of each record, in the records' order: by the input
    position this project records (where the record there has the object's id), else by id.
    ValueError, one sentence, when a record has none or ids are ambiguous."""
    by_id: dict[Any, list[Mapping]] = {}
    for item in items:
        by_id.setdefault(_key(item.get("id")), []).append(item)
    by_index = {item_index(item): item for item in items if item_index(item) is not None}
    out, missing = [], []
    for i, record in enumerate(records):
        rid = record.get("id", i)
        item = by_index.get(i)
        if item is None or item.get("id") != rid:
            found = by_id.get(_key(rid), [])
            if len(found) > 1:
                raise ValueError(f"{source} holds {len(found)} predictions for id {rid!r} "
                                 f"and no input positions to tell them apart")
            item = found[0] if found else None
        if item is None:
            missing.append(rid)
        out.append(item)
    if missing:
        raise ValueError(f"{source} has no prediction for {len(missing)} of the "
                         f"{len(records)} records (the first: id {missing[0]!r})")
    return out


def _key(value: Any) -> str:
    """Ids compared as JSON text (1 and "1" differ; lists and dicts are hashable)."""
    return json.dumps(value, sort_keys=True)


__all__ = ["DEFAULT_DATASOURCE", "OWN_KEY", "REFERENCE_KEYS", "decode_seconds",
           "dumps_predictions", "item_index", "match", "prediction_item", "read_predictions",
           "record_of", "scored_text"]
