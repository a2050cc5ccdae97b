"""planner_predictor: what it asks a planner, and raw text out even for malformed answers."""
import json
from types import SimpleNamespace

import pytest

from wamdiff2_core.evaluation.open_loop import evaluate_open_loop
from wamdiff2_core.evaluation.predictors import planner_predictor
from wamdiff2_core.tasks import AnswerParseError, record_prompt_and_answer


class ScriptedPlanner:
    """Answers like Planner (results with .text; AnswerParseError on a malformed answer) from a
    fixed script, recording every call."""

    def __init__(self, records, malformed_tasks=()):
        self.answers = {r["id"]: record_prompt_and_answer(r)[1] for r in records}
        self.by_task = {t: [r["id"] for r in records if r["task"] == t] for t in
                        ("planning", "detection", "qa")}
        self.malformed = set(malformed_tasks)
        self.calls = []

    def _reply(self, task, index):
        answer = self.answers[self.by_task[task][index]]
        if task in self.malformed:
            raise AnswerParseError(task, "garbage " + answer, "scripted")
        return SimpleNamespace(text=answer)

    def plan(self, observation):
        self.calls.append(("plan", observation))
        return self._reply("planning", sum(c[0] == "plan" for c in self.calls) - 1)

    def detect(self, images):
        self.calls.append(("detect", images))
        return self._reply("detection", sum(c[0] == "detect" for c in self.calls) - 1)

    def answer(self, images, question):
        self.calls.append(("answer", question))
        return self._reply("qa", sum(c[0] == "answer" for c in self.calls) - 1)


def _records(data_dir):
    return json.loads((data_dir / "train.json").read_text())


def test_planner_gets_the_records_inputs(data_dir):
    records = _records(data_dir)
    planner = ScriptedPlanner(records)
    report = evaluate_open_loop(records, planner_predictor(planner), data_dir, progress=False)
    plans = [c[1] for c in planner.calls if c[0] == "plan"]
    assert [o.velocity for o in plans] == [(10.0, 0.0), (5.0, 0.0)]
    assert all(o.command == "straight" and len(o.images) == 1 for o in plans)
    assert [c[1] for c in planner.calls if c[0] == "answer"] == [
        "How many cars are ahead?", "How many cars are in the left lane?"]
    assert report.tasks["planning"]["l2_at_3s"] == 0.0 and report.tasks["qa"]["accuracy"] == 1.0


def test_malformed_planner_answers_are_counted_not_raised(data_dir):
    records = _records(data_dir)
    planner = ScriptedPlanner(records, malformed_tasks=("planning", "detection"))
    report = evaluate_open_loop(records, planner_predictor(planner), data_dir, progress=False)
    assert report.parse_failure_rate == {"planning": 1.0, "detection": 1.0, "qa": 0.0}


def test_a_malformed_record_is_not_hidden_as_a_parse_failure(data_dir):
    record = _records(data_dir)[0]
    record["conversations"][0]["value"] = record["conversations"][0]["value"].replace(
        "straight", "sideways")
    with pytest.raises(AnswerParseError, match="planning_prompt"):
        evaluate_open_loop([record], planner_predictor(ScriptedPlanner([record])), data_dir,
                           progress=False)
