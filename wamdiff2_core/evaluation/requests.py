"""How a record is put to a planner, and what its answer says.

``ask(planner, record)`` is the one statement of what a planner is asked for a record of each
task: the prompt, the decoding settings and the answer's language, exactly as
``Planner.plan`` / ``detect`` / ``answer`` ask them (a planning record's prompt is rewritten
by the planner from the state the record's prompt states; a record of the reference
repository, which names no task, is asked its own human turn as written, as the reference's
inference does, unconstrained, with the planning or detection settings where its answer is
a plan or a box list). One record at a time (``predictors.planner_predictor``) and batched
(``batch_decode``) therefore decode the same requests. ``parsed(task, text, size)`` reads an
answer back for the predictions file.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.types import Observation

#: Characters of text one record may hold in all (every string of it: turns, question, id,
#: image paths, keys), checked before anything is tokenized: a tokenizer handed hundreds of
#: megabytes allocates gigabytes and can abort the process, taking every other record's
#: answer with it. A prompt the model can read is a few thousand tokens; this is far above.
MAX_RECORD_CHARS = 1_000_000


@dataclass(frozen=True)
class Ask:
    """What a planner is asked for one record (images apart)."""

    task: str | None                      # the record's task; None: unknown (no answer turn)
    prompt: str                           # the human turn the model reads
    decode: DecodeConfig
    language: tasks.AnswerLanguage | None
    observation: Observation | None = None   # a planning record's state (its images apart)

    @property
    def group(self) -> tuple:
        """Requests of one group can share a batch: same decoding settings and language."""
        return self.decode, self.language


def check_text(record: Any, limit: int = MAX_RECORD_CHARS) -> None:
    """ValueError, one sentence naming the longest field, when the strings of ``record``
    (keys included) hold more than ``limit`` characters in all. Nesting is bounded by the
    file reader (``user_files``), so the walk is too."""
    total, longest, where = 0, 0, ""
    stack: list[tuple[str, Any]] = [("", record)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, str):
            total += len(value)
            if len(value) > longest:
                longest, where = len(value), name or "the record"
        elif isinstance(value, Mapping):
            for key, inner in value.items():
                total += len(key) if isinstance(key, str) else 0
                stack.append((f"{name}.{key}" if name else str(key)[:40], inner))
        elif isinstance(value, list):
            stack.extend((f"{name}[{i}]", inner) for i, inner in enumerate(value))
    if total > limit:
        raise ValueError(f"the record holds {total:,} characters of text ({where}: "
                         f"{longest:,}), more than the limit of {limit:,}; it is refused "
                         f"before tokenization")


def ask(planner: Any, record: Mapping) -> Ask:
    """The request for ``record`` (a conversation record). ValueError, one sentence, for a
    record that cannot be asked (too much text, malformed, a planning prompt that is not the
    template, a QA record without its question)."""
    check_text(record)
    prompt = tasks.record_prompt_and_answer(record)[0]
    task = record.get("task")
    if task == "planning":
        state = tasks.parse_planning_prompt(prompt)     # the exact state the record states
        observation = Observation(images=[], command=state["command"],
                                  velocity=state["velocity"],
                                  acceleration=state["acceleration"],
                                  position=state["position"])
        return Ask(task, planner.planning_prompt(observation), planner.plan_decode,
                   planner.plan_language, observation)
    if task == "detection":
        return Ask(task, tasks.detection_prompt(), planner.detection_decode,
                   tasks.detection_language())
    if task == "qa":
        question = (record.get("meta") or {}).get("question")
        if not isinstance(question, str):
            raise ValueError("a qa record needs its question in meta.question")
        language = tasks.qa_language() if planner.decode.constrained else None
        return Ask(task, tasks.qa_prompt(question), planner.decode, language)
    task = task if isinstance(task, str) else tasks.record_task(record)
    decode = {"planning": planner.plan_decode,
              "detection": planner.detection_decode}.get(task, planner.decode)
    return Ask(task, prompt, decode, None)


def parsed(task: str | None, text: str, image_size: tuple[int, int] | None) -> dict:
    """What the answer ``text`` of a ``task`` record says, for the predictions file:
    ``{"parsed": {...}}`` (waypoints, boxes in pixels of the first image, or the answer), or
    ``{"parse_error": reason}``; ``{}`` for a task without a parser."""
    try:
        if task == "planning":
            return {"parsed": {"waypoints": tasks.parse_waypoints(text).tolist()}}
        if task == "detection" and image_size is not None:
            boxes, dropped = tasks.parse_model_detections(text, *image_size)
            return {"parsed": {"boxes": [{"bbox": list(d.box), "label": d.label}
                                         for d in boxes], "dropped": dropped}}
        if task == "qa":
            return {"parsed": {"answer": tasks.parse_answer(text)}}
    except tasks.AnswerParseError as exc:
        return {"parse_error": exc.reason}
    return {}


__all__ = ["Ask", "MAX_RECORD_CHARS", "ask", "check_text", "parsed"]
