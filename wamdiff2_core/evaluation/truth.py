"""What a record is scored against: its task and its ground truth, read once, or why not.

A record comes from an input file (a conversation record: the answer is its ``gpt`` turn, a
``system`` turn before the human one is allowed) or, where no input is given, from a
predictions-file object (``predictions.item_record``: the answer is the item's
``ground_truth``; the ``question`` is never read). ``record_truth`` says which task it is and
what its answer is; ``scoring_record`` writes that answer into ``meta`` in the form its
task's scorer reads (waypoints, boxes in pixels, the answer text), so the scorers never
parse a human turn and a record they cannot take is refused here, in one sentence
(``Unscorable``), before any count changes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wamdiff2_core.tasks import (AnswerParseError, answer_task, parse_detections,
                                 parse_waypoints, record_prompt_and_answer)

from .requests import MAX_RECORD_CHARS, check_text

UNKNOWN = "unknown"                 # the task of a failed record whose task cannot be told
ITEM_TRUTH = "ground_truth"         # the key of an item-built record's answer


class Unscorable(ValueError):
    """A record that cannot be scored; ``task`` where it is known."""

    def __init__(self, reason: str, task: str | None = None) -> None:
        super().__init__(reason)
        self.task = task


def record_truth(record: Any) -> tuple[str | None, str | None]:
    """``(task, answer)`` of a record; the task is its ``task`` or what its answer's format
    says (None without either), the answer None where it has none. Unscorable, one
    sentence, for a malformed record or one holding more text than a record may
    (``requests.check_text``: its answer is never parsed then)."""
    if not isinstance(record, Mapping):
        raise Unscorable(f"it is a JSON {type(record).__name__}, not a record object")
    task = record.get("task")
    if task is not None and not isinstance(task, str):
        raise Unscorable(f"its task is a JSON {type(task).__name__}, not a string")
    if ITEM_TRUTH in record and "conversations" not in record:       # built from an item
        answer = record[ITEM_TRUTH]
        answer = answer if isinstance(answer, str) and answer.strip() else None
        if answer is not None and len(answer) > MAX_RECORD_CHARS:
            raise Unscorable(f"its ground_truth is {len(answer):,} characters long, more "
                             f"than the limit of {MAX_RECORD_CHARS:,}", task)
        return task or answer_task(answer), answer
    try:
        check_text(record)
        answer = record_prompt_and_answer(record)[1]
    except ValueError as exc:
        raise Unscorable(f"it is malformed: {exc}", task) from None
    return task or answer_task(answer), answer


def scoring_record(record: Mapping, task: str, answer: str | None,
                   size: tuple[int, int] | None) -> dict:
    """The record as its task's scorer reads it: ``meta`` holding the ground truth
    (``ego_future``, ``boxes`` with ``image_size``, ``answer``), from the record's own
    ``meta`` where it has it, else from ``answer``. ``size``: the first image's (width,
    height) where the record does not state it. Unscorable, one sentence, when the ground
    truth is missing or its task's parser refuses it."""
    meta = record.get("meta", {})
    if not isinstance(meta, Mapping):
        raise Unscorable(f"its meta is a JSON {type(meta).__name__}, not an object", task)
    meta = dict(meta)
    key = {"planning": "ego_future", "detection": "boxes", "qa": "answer"}[task]
    if key not in meta and answer is None:
        raise Unscorable("it has no ground truth", task)
    try:
        if task == "planning" and key not in meta:
            meta[key] = parse_waypoints(answer).tolist()
        elif task == "detection":
            width, height = _size(meta.get("image_size") or size, task)
            meta["image_size"] = [width, height]
            if key not in meta:
                meta[key] = [{"bbox": list(d.box), "label": d.label}
                             for d in parse_detections(answer, width, height)]
        elif task == "qa" and key not in meta:
            meta[key] = answer
    except AnswerParseError as exc:
        raise Unscorable(f"its ground truth is not a {task} answer ({exc.reason})",
                         task) from None
    return {"id": record.get("id"), "task": task, "image": record.get("image", []),
            "meta": meta}


def _size(value: Any, task: str) -> tuple[int, int]:
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                    for v in value)):
        return value[0], value[1]
    raise Unscorable("it states no usable image size, which scoring boxes needs", task)


__all__ = ["ITEM_TRUTH", "UNKNOWN", "Unscorable", "answer_task", "record_truth",
           "scoring_record"]
