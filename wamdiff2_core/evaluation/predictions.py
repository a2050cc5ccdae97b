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

from wamdiff2_core.user_files import MAX_RECORDS_BYTES, read_json_or_lines

from .requests import MAX_RECORD_CHARS

OWN_KEY = "wamdiff2"                  # this project's per-record additions
REFERENCE_KEYS = ("id", "datasource", "image", "question", "prediction", "ground_truth")
TEXT_KEYS = ("question", "prediction", "ground_truth")     # str in every item
DEFAULT_DATASOURCE = "navsim"         # what the reference script writes for a record without one
#: One sentence of what a prediction item is, for the errors that refuse one.
ITEM_SCHEMA = ("a prediction item is a JSON object with id, datasource, image, question, "
               "prediction and ground_truth (the last three strings), error (a string) only "
               "where the record failed, and wamdiff2.index, the record's input position")


def _turns(record: Any) -> list:
    turns = record.get("conversations") if isinstance(record, Mapping) else None
    return [t for t in turns if isinstance(t, Mapping)] if isinstance(turns, list) else []


def _bounded(value: Any) -> Any:
    """A text copied from a record, cut to ``MAX_RECORD_CHARS`` characters: a record refused
    for its size must not make its prediction item (and the output, and the part) as large."""
    if isinstance(value, str) and len(value) > MAX_RECORD_CHARS:
        return value[:MAX_RECORD_CHARS]
    return value


def prediction_item(record: Any, index: int, prediction: str, error: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> dict:
    """The predictions-file object of input record ``index`` (``record`` may be malformed:
    what it lacks is written as the reference writes a missing key). ``error``: why the
    record has no prediction (``prediction`` is then ``""``); ``extra``: this project's
    additions, stored under ``wamdiff2`` with ``index``. Texts longer than
    ``MAX_RECORD_CHARS`` (a record refused for its size) are cut to that length."""
    record = record if isinstance(record, Mapping) else {}
    turns = _turns(record)
    gpt = [t.get("value") for t in turns if t.get("from") == "gpt"]
    question = turns[0].get("value", "") if turns else ""
    item = {"id": _bounded(record.get("id", index)),
            "datasource": _bounded(record.get("datasource", DEFAULT_DATASOURCE)),
            "image": record.get("image", []),
            "question": _bounded(question) if isinstance(question, str) else "",
            "prediction": "" if error is not None else prediction.strip(),
            "ground_truth": _bounded(gpt[0]) if gpt and isinstance(gpt[0], str) else ""}
    if isinstance(item["image"], list) and sum(map(len, filter(
            lambda p: isinstance(p, str), item["image"]))) > MAX_RECORD_CHARS:
        item["image"] = []                        # paths of a record refused for its size
    if error is not None:
        item["error"] = error
    item[OWN_KEY] = {"index": index, **(extra or {})}
    return item


def item_index(item: Mapping) -> int | None:
    """The input position this project recorded for a predictions-file object, if any."""
    own = item.get(OWN_KEY)
    index = own.get("index") if isinstance(own, Mapping) else None
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def item_problem(item: Any, records: Sequence[Any]) -> str | None:
    """What makes ``item`` something other than a prediction item of ``records`` (this
    project's, as a part or a resumed output holds it), in a few words; None when it is one.
    The item must name a position in ``records`` whose record has the item's id."""
    if not isinstance(item, Mapping):
        return f"it is a JSON {type(item).__name__}, not an object"
    missing = [k for k in (*REFERENCE_KEYS, OWN_KEY) if k not in item]
    if missing:
        return f"it lacks {', '.join(missing)}"
    wrong = [k for k in TEXT_KEYS if not isinstance(item[k], str)]
    if "error" in item and not isinstance(item["error"], str):
        wrong.append("error")
    if wrong:
        return f"its {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not a string"
    index = item_index(item)
    if index is None:
        return f"it has no integer {OWN_KEY}.index"
    if not 0 <= index < len(records):
        return f"its {OWN_KEY}.index {index} is outside the input's {len(records)} records"
    record = records[index]
    expected = _bounded(record.get("id", index)) if isinstance(record, Mapping) else index
    if _key(item["id"]) != _key(expected):
        return f"its id is not the id of input record {index}"
    if "error" not in item and not isinstance(item[OWN_KEY].get("task", ""), (str, type(None))):
        return f"its {OWN_KEY}.task is not a string"
    return None


def dumps_predictions(items: Sequence[Mapping], path: str | os.PathLike) -> bytes:
    """The bytes of a predictions file: a JSON list indented as the reference writes it, or
    for a ``.jsonl`` path one object per line."""
    if Path(path).suffix == ".jsonl":
        text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
    else:
        text = json.dumps(list(items), indent=4, ensure_ascii=False) + "\n"
    return text.encode("utf-8")


def read_predictions(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[dict]:
    """The objects of one or more predictions files (JSON list or JSONL), ours or the
    reference's (its merged file, sorted by ``str(id)``, or its per-rank files), in the
    order given. ValueError, one sentence naming the file, when one cannot be read or holds
    something that is not a prediction object (an object with an ``id`` and a str
    ``prediction``); what else an object lacks is the scorer's to count, item by item."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    items: list[dict] = []
    for path in paths:
        found = read_json_or_lines(path, "predictions file", max_bytes=MAX_RECORDS_BYTES,
                                   max_line_bytes=MAX_RECORDS_BYTES)
        for i, item in enumerate(found):
            if not isinstance(item, dict):
                raise ValueError(f"{path}: entry {i} is a JSON {type(item).__name__}, not a "
                                 f"prediction object")
            missing = [k for k in ("id", "prediction") if k not in item]
            if missing or not isinstance(item["prediction"], str):
                raise ValueError(f"{path}: entry {i} is not a prediction (it needs a str "
                                 f"'prediction' and an 'id'; missing: "
                                 f"{', '.join(missing) or 'none'})")
        items += found
    return items


def item_record(item: Mapping) -> dict:
    """What scoring knows of a record from its predictions-file object alone: id, images,
    the ground truth (``ground_truth``, None where blank: ``truth.record_truth`` reads it)
    and, where this project wrote them, the task and the first image's size. The
    ``question`` is not read: both tools write the record's first turn there, which may be
    a system turn or ``""`` (a record without conversations), so it says nothing reliable
    about the record."""
    own = item.get(OWN_KEY) if isinstance(item.get(OWN_KEY), Mapping) else {}
    truth = item.get("ground_truth")
    record = {"id": item.get("id"), "image": item.get("image", []),
              "ground_truth": truth if isinstance(truth, str) and truth.strip() else None}
    if isinstance(own.get("task"), str):
        record["task"] = own["task"]
    size = own.get("image_size")
    if (isinstance(size, list) and len(size) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)):
        record["meta"] = {"image_size": size}                 # boxes scored without images
    return record


def item_error(item: Mapping) -> str | None:
    """Why the record of a predictions-file object failed, or None when it did not (an
    ``error`` key, of any value, marks a failure, as both tools write it)."""
    if "error" not in item:
        return None
    error = item["error"]
    return error if isinstance(error, str) and error else "failed (no reason given)"


def decode_seconds(item: Mapping) -> float:
    """The record's share of its batch's decode time, where this project recorded it (s)."""
    own = item.get(OWN_KEY)
    if not isinstance(own, Mapping) or not _number(own.get("decode_ms")):
        return 0.0
    batch = own.get("batch_size")
    batch = batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else 1
    return max(0.0, own["decode_ms"] / 1e3 / batch)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def match(records: Sequence[Any], items: Sequence[Mapping], source: str,
          positions: Sequence[int] | None = None) -> list[Mapping]:
    """The predictions-file object of each record, in the records' order: joined on ``id``
    (a record without one has its input position as id, as both tools write it); where ids
    repeat, the input position this project records tells them apart. ``positions``: each
    record's position in the input the predictions were made from (default: its position
    in ``records``). ValueError, one sentence, when a record has no prediction or ids are
    ambiguous."""
    positions = range(len(records)) if positions is None else positions
    by_id: dict[str, list[Mapping]] = {}
    for item in items:
        by_id.setdefault(_key(item.get("id")), []).append(item)
    out, missing = [], []
    for i, record in zip(positions, records, strict=True):
        rid = record.get("id", i) if isinstance(record, Mapping) else i
        found = by_id.get(_key(rid), [])
        if len(found) > 1:
            found = [item for item in found if item_index(item) == i] or found
        if len(found) > 1:
            raise ValueError(f"{source} holds {len(found)} predictions for id {rid!r} "
                             f"and no input positions to tell them apart")
        if not found:
            missing.append(rid)
        out.append(found[0] if found else None)
    if missing:
        raise ValueError(f"{source} has no prediction for {len(missing)} of the "
                         f"{len(records)} records (the first: id {missing[0]!r}); give every "
                         f"file of the run to --predictions (the reference's per-rank files "
                         f"NAME_rank0.json, NAME_rank1.json, ... together)")
    return out


def _key(value: Any) -> str:
    """Ids compared as JSON text (1 and "1" differ; lists and dicts are hashable)."""
    return json.dumps(value, sort_keys=True)


__all__ = ["DEFAULT_DATASOURCE", "ITEM_SCHEMA", "OWN_KEY", "REFERENCE_KEYS", "TEXT_KEYS",
           "decode_seconds", "dumps_predictions", "item_error", "item_index", "item_problem",
           "item_record", "match", "prediction_item", "read_predictions"]
