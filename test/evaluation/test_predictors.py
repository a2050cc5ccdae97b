"""planner_predictor: what it asks a planner, and raw text out even for malformed answers."""
import json

import pytest

from wamdiff2_core import tasks
from wamdiff2_core.evaluation.open_loop import evaluate_open_loop
from wamdiff2_core.evaluation.predictors import planner_predictor
from wamdiff2_core.planner import DETECTION_MAX_NEW_TOKENS, Planner
from wamdiff2_core.tasks import AnswerParseError, record_prompt_and_answer


@pytest.fixture(scope="module")
def bundled():
    return Planner.from_pretrained()


def scripted(planner, records, garbage_tasks=()):
    """A copy of ``planner`` whose decoder answers from a script (each record's own answer,
    in order per task; garbage for ``garbage_tasks``), recording every request."""
    copy = planner.reconfigure(planner.config)
    answers = {t: [record_prompt_and_answer(r)[1] for r in records if r["task"] == t]
               for t in ("planning", "detection", "qa")}
    copy.calls = []

    def generate(prompts, images, decode=None, language=None):
        task = ("planning" if "navigation" in prompts[0] else
                "detection" if "Detect" in prompts[0] else "qa")
        copy.calls.append((task, prompts[0], len(images[0]), decode, language))
        answer = answers[task][sum(c[0] == task for c in copy.calls) - 1]
        return ["garbage " + answer if task in garbage_tasks else answer], None

    copy.generate = generate
    return copy


def _records(data_dir):
    return json.loads((data_dir / "train.json").read_text())


def test_planner_gets_the_records_inputs(bundled, data_dir):
    records = _records(data_dir)
    planner = scripted(bundled, records)
    report = evaluate_open_loop(records, planner_predictor(planner), data_dir, progress=False)
    plans = [c for c in planner.calls if c[0] == "planning"]
    assert ["velocity is: (10.00,0.00)" in c[1] for c in plans] == [True, False]
    assert ["velocity is: (5.00,0.00)" in c[1] for c in plans] == [False, True]
    assert all(c[2] == 1 and c[3] == bundled.plan_decode and c[4] == bundled.plan_language
               for c in plans)
    detections = [c for c in planner.calls if c[0] == "detection"]
    assert all(c[3].max_new_tokens >= DETECTION_MAX_NEW_TOKENS for c in detections)
    assert [c[1] for c in planner.calls if c[0] == "qa"] == [
        tasks.qa_prompt("How many cars are ahead?"),
        tasks.qa_prompt("How many cars are in the left lane?")]
    assert report.tasks["planning"]["l2_at_3s"] == 0.0 and report.tasks["qa"]["accuracy"] == 1.0


def test_malformed_planner_answers_are_counted_not_raised(bundled, data_dir):
    records = _records(data_dir)
    planner = scripted(bundled, records, garbage_tasks=("planning", "detection"))
    report = evaluate_open_loop(records, planner_predictor(planner), data_dir, progress=False)
    assert report.parse_failure_rate == {"planning": 1.0, "detection": 1.0, "qa": 0.0}


def test_a_malformed_record_is_not_hidden_as_a_parse_failure(bundled, data_dir):
    record = _records(data_dir)[0]
    record["conversations"][0]["value"] = record["conversations"][0]["value"].replace(
        "straight", "sideways")
    with pytest.raises(AnswerParseError, match="planning_prompt"):
        evaluate_open_loop([record], planner_predictor(scripted(bundled, [record])), data_dir,
                           progress=False)
