"""``predict(record, image) -> raw text`` functions for :func:`evaluate_open_loop`.

- :func:`planner_predictor`: a :class:`wamdiff2_core.planner.Planner` answering each record's
  task (its parsed result is discarded: evaluation parses the raw text itself, so a
  malformed answer is counted, not raised);
- :func:`ground_truth_predictor`: the record's own answer (an oracle: L2 0, AP 1, accuracy
  1), to check a data set and the evaluation pipeline without a model.

:func:`timed_answer` runs one planner call and keeps what an offline evaluation needs of it
(raw text, parsed or not and why, wall time, decode stats); offline bag evaluation uses it
too.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.tasks import AnswerParseError, parse_planning_prompt, record_prompt_and_answer
from wamdiff2_core.types import Observation

from .open_loop import Predict

GROUND_TRUTH = "ground-truth"     # the --checkpoint value that selects the oracle


def ground_truth_predictor() -> Predict:
    """Answers every record with its own recorded answer ("" when it has none)."""
    def predict(record: dict, image: Any) -> str:
        return record_prompt_and_answer(record)[1] or ""
    return predict


@dataclass
class TaskAnswer:
    """One planner call's answer: ``result`` (a PlanResult, DetectResult or AnswerResult) when
    it parsed, else ``reason`` says why; ``text`` is the raw answer either way."""

    text: str
    ok: bool                                    # the answer parsed
    ms: float                                   # wall time of the call
    stats: DecodeStats = field(default_factory=DecodeStats)
    reason: str = ""                            # why it did not parse
    result: Any = None


def timed_answer(call: Callable[[], Any]) -> TaskAnswer:
    """Run ``call`` (a planner's plan / detect / answer); a malformed answer is returned as a
    TaskAnswer that did not parse, with its raw text, never raised."""
    tic = time.perf_counter()
    try:
        result = call()
    except AnswerParseError as exc:
        return TaskAnswer(exc.raw_text, False, _ms(tic), reason=exc.reason)
    stats = getattr(result, "stats", None) or DecodeStats()    # any object with .text works
    return TaskAnswer(result.text, True, _ms(tic), stats, result=result)


def _ms(tic: float) -> float:
    return (time.perf_counter() - tic) * 1e3


def _plan(planner: Any, record: Mapping, images: list) -> str:
    prompt = record_prompt_and_answer(record)[0]
    state = parse_planning_prompt(prompt)       # the exact prompt the record was made with
    observation = Observation(images=images, command=state["command"],
                              velocity=state["velocity"], acceleration=state["acceleration"],
                              position=state["position"])
    return timed_answer(lambda: planner.plan(observation)).text


def _detect(planner: Any, record: Mapping, images: list) -> str:
    return timed_answer(lambda: planner.detect(images)).text


def _answer(planner: Any, record: Mapping, images: list) -> str:
    question = record["meta"]["question"]
    return timed_answer(lambda: planner.answer(images, question)).text


#: task name -> the planner's raw answer text for a record of that task. Only the model's
#: answer may fail to parse quietly; a malformed record (prompt, meta) raises.
PLANNER_CALLS: dict[str, Callable[[Any, Mapping, list], str]] = {
    "planning": _plan,
    "detection": _detect,
    "qa": _answer,
}


def planner_predictor(planner: Any) -> Predict:
    """Raw answer text of ``planner`` for each record, malformed answers included."""
    def predict(record: dict, image: Any) -> str:
        images = [image] if image is not None else []
        return PLANNER_CALLS[record["task"]](planner, record, images)
    return predict
