"""evaluate_open_loop on a hand-made data set with hand-written predict functions."""
import json

import numpy as np
import pytest
from eval_data import make_records, straight

from wamdiff2_core.evaluation.open_loop import OpenLoopReport, evaluate_open_loop
from wamdiff2_core.evaluation.open_loop_report import format_summary, write_report
from wamdiff2_core.evaluation.predictors import ground_truth_predictor
from wamdiff2_core.tasks import format_waypoints, record_prompt_and_answer


def _run(data_dir, predict) -> OpenLoopReport:
    records = json.loads((data_dir / "train.json").read_text())
    return evaluate_open_loop(records, predict, data_dir, progress=False)


def test_ground_truth_answers_score_perfectly(data_dir):
    seen = []

    def predict(record, image):
        seen.append(image.size)
        return ground_truth_predictor()(record, image)

    report = _run(data_dir, predict)
    assert seen == [(160, 90)] * 6                   # one RGB image per record
    p, d, q = (report.tasks[t] for t in ("planning", "detection", "qa"))
    assert p["l2_per_waypoint"] == [0.0] * 8 and p["l2_at_3s"] == 0.0 and p["l2_avg_2s"] == 0.0
    assert p["collision_rate"] == 0.0 and p["gt_collision_rate"] == 0.0
    assert d["map"] == pytest.approx(1.0) and d["ap50"] == pytest.approx(1.0)
    assert q["accuracy"] == 1.0 and q["in_answer_set_rate"] == 1.0
    assert report.parse_failure_rate == {"planning": 0.0, "detection": 0.0, "qa": 0.0}


@pytest.mark.parametrize("garbage", ["", "I am not sure.", None, "1,2,3"])
def test_garbage_is_a_parse_failure_never_an_exception(data_dir, garbage):
    report = _run(data_dir, lambda record, image: garbage)
    p, d, q = (report.tasks[t] for t in ("planning", "detection", "qa"))
    assert p["parse_failure_rate"] == 1.0 and p["num_parsed"] == 0
    assert p["l2_at_1s"] is None and p["collision_rate"] is None
    assert d["parse_failure_rate"] == 1.0 and d["map"] == 0.0   # every box missed
    # QA: any non-blank text is a valid answer; only blank/non-str fail to parse
    blank = garbage is None or not garbage.strip()
    assert q["parse_failure_rate"] == (1.0 if blank else 0.0)
    assert q["accuracy"] == 0.0


def test_known_errors_and_a_known_collision(data_dir):
    def predict(record, image):
        if record["task"] == "planning" and record["id"] == "p0":
            return format_waypoints(straight(10.0, lateral_m=1.0))    # 1 m off everywhere
        if record["task"] == "planning":
            return format_waypoints(straight(10.0))    # p1: drives into the stopped car
        if record["id"] == "q1":
            return "One"                               # wrong but in the answer set
        return record_prompt_and_answer(record)[1]

    p = _run(data_dir, predict).tasks["planning"]
    # p1's error grows 2.5 m per waypoint (10 vs 5 m/s): waypoint k is off by 2.5 k m
    expected = (1.0 + 2.5 * np.arange(1, 9)) / 2
    np.testing.assert_allclose(p["l2_per_waypoint"], expected)
    assert p["l2_at_1s"] == pytest.approx(expected[1])
    assert p["l2_avg_3s"] == pytest.approx(expected[:6].mean())
    # p1 reaches x = 30 m at t = 3 s (waypoint 6): 1 plan of 2 collides, from 3 s on
    assert p["collision_rate"] == 0.5 and p["gt_collision_rate"] == 0.0
    assert p["collision_rate_by_2s"] == 0.0 and p["collision_rate_by_3s"] == 0.5
    assert p["collision_rate_per_waypoint"] == [0, 0, 0, 0, 0, 0.5, 0, 0]
    q = _run(data_dir, predict).tasks["qa"]
    assert q["accuracy"] == 0.5 and q["in_answer_set_rate"] == 1.0


def test_unknown_tasks_are_skipped_and_counted(data_dir):
    records = make_records() + [dict(make_records()[0], task="captioning")]
    report = evaluate_open_loop(records, ground_truth_predictor(), data_dir, progress=False)
    assert report.skipped == {"captioning": 1} and report.num_records == 7
    assert report.tasks["planning"]["num_records"] == 2


def test_report_is_json_and_names_its_conventions(data_dir):
    report = _run(data_dir, ground_truth_predictor())
    data = json.loads(json.dumps(report.to_dict()))
    assert {"planning", "detection", "qa", "parse_failure_rate", "conventions"} <= set(data)
    for key in ("l2_at_1s", "l2_at_2s", "l2_at_3s", "l2_avg_1s", "l2_avg_2s", "l2_avg_3s",
                "l2_per_waypoint", "collision_rate"):
        assert key in data["planning"]
    assert {"map", "ap50"} <= set(data["detection"]) and "accuracy" in data["qa"]
    text = format_summary(report)
    assert "mAP@[.5:.95] 1.000" in text and "exact-match accuracy 100.0%" in text
    by_area = data["detection"]["by_area"]                   # every size found, each counted
    assert sum(a["num_gt"] for a in by_area.values()) >= data["detection"]["num_gt"]
    assert all(a["ap50"] == pytest.approx(1.0) for a in by_area.values() if a["num_gt"])
    assert "AP50 / recall@0.5 by box area" in text


def test_no_records_gives_undefined_metrics(data_dir):
    report = evaluate_open_loop([], ground_truth_predictor(), data_dir, progress=False)
    assert report.tasks["detection"]["map"] is None
    assert report.tasks["planning"]["l2_at_1s"] is None
    assert report.parse_failure_rate == {"planning": None, "detection": None, "qa": None}
    json.dumps(report.to_dict())
    assert "0 records" in format_summary(report)


def test_write_report_writes_json_text_and_pngs(data_dir, tmp_path):
    report = _run(data_dir, ground_truth_predictor())
    paths = write_report(report, tmp_path / "out")
    assert set(paths) == {"json", "summary", "l2_plot", "collision_plot"}
    assert json.loads(paths["json"].read_text())["num_records"] == 6
    for key in ("l2_plot", "collision_plot"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
