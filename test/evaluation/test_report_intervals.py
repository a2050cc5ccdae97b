"""Every open-loop and closed-loop mean carries its 95% bootstrap interval (JSON, text,
plots)."""
import json

import numpy as np
import pytest

from wamdiff2_core.evaluation.closed_loop_report import build_report, format_text, write_report
from wamdiff2_core.evaluation.open_loop import evaluate_open_loop
from wamdiff2_core.evaluation.open_loop_report import format_summary
from wamdiff2_core.evaluation.open_loop_report import write_report as write_open
from wamdiff2_core.evaluation.predictors import ground_truth_predictor
from wamdiff2_core.tasks import format_waypoints, record_prompt_and_answer


def _predict(record, image):
    """p0 1 m off everywhere, p1 10 m/s where the expert drives 5, q1 wrong, the rest right."""
    from eval_data import straight

    if record["task"] == "planning":
        return format_waypoints(straight(10.0, lateral_m=1.0) if record["id"] == "p0"
                                else straight(10.0))
    if record["id"] == "q1":
        return "One"
    return record_prompt_and_answer(record)[1]


def _report(data_dir, predict):
    records = json.loads((data_dir / "train.json").read_text())
    return evaluate_open_loop(records, predict, data_dir, progress=False)


def test_open_loop_means_carry_their_intervals(data_dir, tmp_path):
    report = _report(data_dir, _predict)
    p, q = report.tasks["planning"], report.tasks["qa"]
    ci = p["intervals"]
    # two plans: the resampled means' 2.5th / 97.5th percentiles are the two plans' values
    per_plan = [1.0, float(np.mean(2.5 * np.arange(1, 9)))]
    assert ci["l2_mean"] == pytest.approx(sorted(per_plan))
    assert ci["l2_mean"][0] <= p["l2_mean"] <= ci["l2_mean"][1]
    assert ci["collision_rate"] == [0.0, 1.0]                # one of the two plans collides
    assert ci["parse_failure_rate"] == [0.0, 0.0]            # exact: no plan failed
    assert len(ci["l2_per_waypoint"]) == 8 and ci["l2_per_waypoint"][0] == pytest.approx(
        [1.0, 2.5])
    assert q["intervals"]["accuracy"] == [0.0, 1.0]          # one right, one wrong
    assert report.tasks["detection"]["intervals"]["parse_failure_rate"] == [0.0, 0.0]
    text = format_summary(report)
    assert "95% intervals (bootstrap over records): L2 avg 3 s [" in text
    assert "QA: exact-match accuracy 50.0% [0.0%, 100.0%]" in text
    paths = write_open(report, tmp_path / "out")
    assert paths["l2_plot"].stat().st_size > 0
    saved = json.loads(paths["json"].read_text())
    assert saved["planning"]["intervals"]["l2_mean"] == pytest.approx(sorted(per_plan))


def test_perfect_answers_have_exact_zero_width_intervals(data_dir):
    p = _report(data_dir, ground_truth_predictor()).tasks["planning"]
    assert p["intervals"]["l2_mean"] == [0.0, 0.0]
    assert p["intervals"]["l2_avg_3s"] == [0.0, 0.0]


def test_garbage_answers_have_no_l2_interval(data_dir):
    p = _report(data_dir, lambda record, image: "").tasks["planning"]
    assert p["intervals"]["l2_mean"] is None and p["intervals"]["l2_per_waypoint"] is None
    assert p["intervals"]["parse_failure_rate"] == [1.0, 1.0]


def test_closed_loop_report_carries_the_intervals(tmp_path):
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
    from wamdiff2_core.sim.planners import make_planner

    config = ClosedLoopConfig(episodes=3, seed=7300, duration_s=8.0)
    results = run_closed_loop(make_planner("constant-velocity"), config, progress=False)
    report = build_report(results, "constant-velocity", config, 0.0)
    scores = [r.score.score for r in results]
    low, high = report["intervals"]["score"]
    assert min(scores) <= low <= report["score"] <= high <= max(scores)
    assert set(report["intervals"]["terms"]) == set(report["terms"])
    assert report["intervals"]["episodes"] == 3
    for name, item in report["by_scenario"].items():
        assert item["interval"] is None                   # one episode each: no interval
    text = format_text(report)
    assert f"score {report['score']:.3f} [{low:.3f}, {high:.3f}]" in text
    paths = write_report(tmp_path, results, report, max_plots=0)
    assert json.loads(paths[0].read_text())["intervals"]["score"] == [low, high]
