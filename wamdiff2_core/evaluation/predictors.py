"""``predict(record, image) -> raw text`` functions for :func:`evaluate_open_loop`.

- :func:`planner_predictor`: a :class:`wamdiff2_core.planner.Planner` answering each record's
  task (its parsed result is discarded: evaluation parses the raw text itself, so a
  malformed answer is counted, not raised);
- :func:`ground_truth_predictor`: the record's own answer (an oracle: L2 0, AP 1, accuracy
  1), to check a data set and the evaluation pipeline without a model.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wamdiff2_core.tasks import AnswerParseError, parse_planning_prompt, record_prompt_and_answer

from .open_loop import Predict

GROUND_TRUTH = "ground-truth"     # the --checkpoint value that selects the oracle


def ground_truth_predictor() -> Predict:
    """Answers every record with its own recorded answer ("" when it has none)."""
    def predict(record: dict, image: Any) -> str:
        return record_prompt_and_answer(record)[1] or ""
    return predict


def _raw_text(call: Callable[[], Any]) -> str:
    """The ``.text`` of a planner result, or the raw text of the answer it failed to parse."""
    try:
        return call().text
    except AnswerParseError as exc:
        return exc.raw_text


def _plan(planner: Any, record: Mapping, images: list) -> str:
    from wamdiff2_core.planner import Observation

    prompt = record_prompt_and_answer(record)[0]
    state = parse_planning_prompt(prompt)       # the exact prompt the record was made with
    observation = Observation(images=images, command=state["command"],
                              velocity=state["velocity"], acceleration=state["acceleration"],
                              position=state["position"])
    return _raw_text(lambda: planner.plan(observation))


def _detect(planner: Any, record: Mapping, images: list) -> str:
    return _raw_text(lambda: planner.detect(images))


def _answer(planner: Any, record: Mapping, images: list) -> str:
    question = record["meta"]["question"]
    return _raw_text(lambda: planner.answer(images, question))


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
