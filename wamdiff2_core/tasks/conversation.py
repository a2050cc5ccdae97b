"""Conversation records in the reference repository's (ShareGPT-style) JSON format.

A record, as the reference training and inference code reads it::

    {"id": "43ebecce459052f2", "task": "planning",
     "image": ["path/to/CAM_F0.jpg"],
     "conversations": [{"from": "human", "value": "Here is ... <image>\\n..."},
                       {"from": "gpt", "value": "2.26,-0.17,..."}]}

The reference code replaces the k-th "<image>" of the human turn by the k-th image path, so a
record must hold as many placeholders as images. Reference data may carry other keys
("datasource" ...) and no "task"; reading ignores keys it does not know.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

from .text import IMAGE_PLACEHOLDER

HUMAN, GPT, SYSTEM = "human", "gpt", "system"


def _check_id(id: Any, error=ValueError) -> None:
    if isinstance(id, bool) or not isinstance(id, (str, int)):
        raise error(f"record id must be a str or int, got {type(id).__name__}")


def conversation_record(id: str | int, image_paths: Sequence[str], prompt: str,
                        answer: str | None, task: str) -> dict:
    """A reference-format conversation record (JSON-serialisable ``dict``).

    Args:
        id: sample id, a str (as in the reference data) or an int.
        image_paths: one path per "<image>" placeholder in *prompt*, in order (str or
            os.PathLike; stored as str). A single str is refused (it is not a list of paths).
        prompt: the human turn, e.g. from :func:`planning_prompt`.
        answer: the gpt turn, e.g. from :func:`format_waypoints`; ``None`` writes a record
            with the human turn only (an evaluation input without ground truth).
        task: task name, e.g. "planning", "detection" or "qa".

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a blank prompt or task, or as many images as placeholders not matching.
    """
    _check_id(id, TypeError)
    if isinstance(image_paths, (str, bytes)) or not isinstance(image_paths, Sequence):
        raise TypeError("image_paths must be a list of paths, got "
                        f"{type(image_paths).__name__}")
    images = []
    for path in image_paths:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"image path must be a str or os.PathLike, got {type(path).__name__}")
        path = os.fspath(path)
        if not isinstance(path, str) or not path:
            raise ValueError(f"image path must be a non-empty str, got {path!r}")
        images.append(path)
    if not isinstance(prompt, str) or not isinstance(task, str):
        raise TypeError("prompt and task must be str")
    if not prompt.strip():
        raise ValueError("prompt must not be blank")
    if not task.strip():
        raise ValueError("task must not be blank")
    if answer is not None and not isinstance(answer, str):
        raise TypeError(f"answer must be a str or None, got {type(answer).__name__}")
    placeholders = prompt.count(IMAGE_PLACEHOLDER)
    if placeholders != len(images):
        raise ValueError(f"prompt has {placeholders} {IMAGE_PLACEHOLDER!r} placeholder(s) "
                         f"but {len(images)} image path(s) were given")
    turns = [{"from": HUMAN, "value": str.__str__(prompt)}]
    if answer is not None:
        turns.append({"from": GPT, "value": str.__str__(answer)})
    return {"id": id, "task": str.__str__(task), "image": images, "conversations": turns}


def record_prompt_and_answer(record: Any) -> tuple[str, str | None]:
    """``(prompt, answer)`` of a conversation record; *answer* is None without a gpt turn.

    Accepts records made by :func:`conversation_record` and the reference repository's
    records: "image" may be a list of str or one str (read as a one-item list) or absent (no
    images); other keys are ignored. The turns must be: an optional "system" turn, one
    "human" turn, then at most one "gpt" turn. The human turn must hold one "<image>"
    placeholder per image.

    Raises:
        ValueError: a malformed record, with a message saying what is wrong.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"record must be a JSON object (dict), got {type(record).__name__}")
    if "id" in record:
        _check_id(record["id"])
    if "task" in record and not isinstance(record["task"], str):
        raise ValueError(f"record task must be a str, got {type(record['task']).__name__}")
    images = record.get("image", [])
    if isinstance(images, str):
        images = [images]
    if not isinstance(images, list) or not all(isinstance(p, str) and p for p in images):
        raise ValueError("record image must be a list of non-empty str paths (or one str)")
    turns = record.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise ValueError("record must have a non-empty 'conversations' list")
    roles = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            raise ValueError(f"conversations[{i}] must be an object, got {type(turn).__name__}")
        if not isinstance(turn.get("from"), str) or not isinstance(turn.get("value"), str):
            raise ValueError(f"conversations[{i}] must have str 'from' and 'value'")
        roles.append(turn["from"])
    if roles and roles[0] == SYSTEM:
        turns, roles = turns[1:], roles[1:]
    if roles not in ([HUMAN], [HUMAN, GPT]):
        raise ValueError("conversations must be [system?, human, gpt?], got roles "
                         f"{[t['from'] for t in record['conversations']][:8]!r}")
    prompt = str.__str__(turns[0]["value"])
    if not prompt.strip():
        raise ValueError("the human turn must not be blank")
    placeholders = prompt.count(IMAGE_PLACEHOLDER)
    if placeholders != len(images):
        raise ValueError(f"the human turn has {placeholders} {IMAGE_PLACEHOLDER!r} "
                         f"placeholder(s) but the record has {len(images)} image(s)")
    answer = str.__str__(turns[1]["value"]) if len(turns) == 2 else None
    return prompt, answer


RECORDS_FILE = "train.json"      # what `wamdiff2 data generate` writes (docs/INTERFACES.md)


def records_path(data: str | os.PathLike) -> Path:
    """The records file of a data set: ``data`` itself, or ``data/train.json`` for a
    directory. ValueError when there is none."""
    path = Path(data)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.is_file():
        raise ValueError(f"no records file at {path}")
    return path


def read_records(path: str | os.PathLike) -> list:
    """The records of a JSON list or JSONL file (``.jsonl``, or any file whose text does not
    start with ``[``), read within ``user_files``' limits (size, nesting, regular files
    only). ValueError, one sentence naming the file (and for JSONL the line), when it cannot
    be read, is not valid JSON, not a list of records, or empty."""
    from wamdiff2_core.user_files import (DEFAULT_MAX_DEPTH as MAX_DEPTH, MAX_RECORDS_BYTES,
                                          UserFileError, read_json, read_json_or_lines)

    path = Path(path)
    try:
        records, form = read_json_or_lines(path, "records file", with_format=True)
    except UserFileError as exc:
        if " is not valid JSON" not in exc.problem or not exc.problem.startswith("line "):
            raise
        try:                            # one JSON document over several lines?
            _refuse_one_document(path, read_json(path, "records file", MAX_RECORDS_BYTES,
                                                 MAX_DEPTH))
        except UserFileError:
            pass
        raise ValueError(f"{exc}; a records file is a JSON list or one JSON object per "
                         f"line") from None
    if form == "lines" and len(records) == 1:
        _refuse_one_document(path, records[0])
    if not records:
        raise ValueError(f"records file {path} holds no records")
    return records


def _refuse_one_document(path: Path, doc) -> None:
    """A file that is one JSON document but neither a list nor one record (e.g. an object
    holding the list) is refused as such."""
    if not (isinstance(doc, dict) and "conversations" in doc):
        what = (f"a JSON object with keys {sorted(map(str, doc))[:5]}"
                if isinstance(doc, dict) else f"a JSON {type(doc).__name__}")
        raise ValueError(f"records file {path} must hold a JSON list of records or one "
                         f"record per line, got {what}")


def record_task(record: Mapping) -> str | None:
    """The task of a record: its ``"task"``, or for the reference repository's data (which
    names none) the task its answer's format says (``answer_task``); None without a task or
    an answer. ValueError (from ``record_prompt_and_answer``) for a malformed record."""
    if isinstance(record, Mapping) and isinstance(record.get("task"), str):
        return record["task"]
    return answer_task(record_prompt_and_answer(record)[1])


def answer_task(answer: str | None) -> str | None:
    """The task an answer's format says: eight waypoints -> ``planning``, a box list ->
    ``detection``, any other text -> ``qa``; None for no answer (or a blank one)."""
    from .detection import parse_detections
    from .errors import AnswerParseError
    from .planning import parse_waypoints

    if answer is None or not answer.strip():
        return None
    for task, parse in (("planning", parse_waypoints),
                        ("detection", lambda text: parse_detections(text, 1000, 1000))):
        try:
            parse(answer)
            return task
        except AnswerParseError:
            pass
    return "qa"
