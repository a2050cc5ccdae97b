"""``predict(record, image) -> raw text`` functions for :func:`evaluate_open_loop`.

- :func:`planner_predictor`: a :class:`wamdiff2_core.planner.Planner` answering each record
  as ``requests.ask`` puts it (the raw text: evaluation parses it itself, so a malformed
  answer is counted, not raised);
- :func:`ground_truth_predictor`: the record's own answer (an oracle: L2 0, AP 1, accuracy
  1), to check a data set and the evaluation pipeline without a model;
- :func:`constant_velocity_predictor`: a planning record's plan straight ahead at its
  prompt's forward speed (the model-free baseline a planner's L2 should beat).

:func:`timed_answer` runs one planner call and keeps what an offline evaluation needs of it
(raw text, parsed or not and why, wall time, decode stats); offline bag evaluation uses it
too.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.tasks import (NUM_WAYPOINTS, WAYPOINT_DT_S, AnswerParseError,
                                 format_waypoints, parse_planning_prompt,
                                 record_prompt_and_answer)

from .open_loop import Predict
from .requests import ask

GROUND_TRUTH = "ground-truth"     # the --checkpoint value that selects the oracle
CONSTANT_VELOCITY = "constant-velocity"   # ... and the one that selects the baseline


def ground_truth_predictor() -> Predict:
    """Answers every record with its own recorded answer ("" when it has none)."""
    def predict(record: dict, image: Any) -> str:
        return record_prompt_and_answer(record)[1] or ""
    return predict


def constant_velocity_predictor() -> Predict:
    """Answers a planning record with the plan of driving straight ahead at its prompt's
    forward speed (never backwards), as ``eval closed-loop --planner constant-velocity``
    drives; "" (a parse failure) for a record whose prompt is no planning prompt or whose
    speed puts the plan beyond what a planning answer may hold."""
    times = np.arange(1, NUM_WAYPOINTS + 1) * WAYPOINT_DT_S          # (8,) seconds ahead

    def predict(record: dict, image: Any) -> str:
        try:
            state = parse_planning_prompt(record_prompt_and_answer(record)[0])
            speed = max(float(state["velocity"][0]), 0.0)
            return format_waypoints(np.stack([speed * times, np.zeros(NUM_WAYPOINTS)],
                                             axis=1))              # (8, 2) x forward, y left
        except ValueError:
            return ""
    return predict


#: The --checkpoint values that answer without a model, and their predictors.
MODEL_FREE: dict[str, Callable[[], Predict]] = {
    GROUND_TRUTH: ground_truth_predictor,
    CONSTANT_VELOCITY: constant_velocity_predictor,
}


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
        return TaskAnswer(exc.raw_text, False, _ms(tic),
                          getattr(exc, "stats", None) or DecodeStats(), reason=exc.reason)
    stats = getattr(result, "stats", None) or DecodeStats()    # any object with .text works
    return TaskAnswer(result.text, True, _ms(tic), stats, result=result)


def _ms(tic: float) -> float:
    return (time.perf_counter() - tic) * 1e3


def planner_predictor(planner: Any) -> Predict:
    """Raw answer text of ``planner`` for each record, malformed answers included, asked as
    ``requests.ask`` says (records of this project's data sets as the planner's task calls
    ask them; the reference repository's records, which name no task, by their own human
    turn, as the reference's inference does): the requests ``wamdiff2 predict`` decodes in
    batches, here one at a time."""
    def predict(record: dict, image: Any) -> str:
        request = ask(planner, record)
        images = [image] if image is not None else []
        texts, _ = planner.generate([request.prompt], [images], request.decode,
                                    request.language)
        return texts[0]
    return predict
