"""`wamdiff2 eval open-loop` end to end on a tiny hand-made data set."""
import json

import pytest

from wamdiff2_core.apps.cli import build_parser, main


def test_eval_group_lists_open_loop():
    parser = build_parser()
    args = parser.parse_args(["eval", "open-loop", "--checkpoint", "x", "--data", "y"])
    assert args.func.__name__ == "run_open_loop" and args.out == "runs/eval/open-loop"


def test_ground_truth_run_writes_report_and_plots(data_dir, tmp_path, capsys):
    out = tmp_path / "report"
    rc = main(["eval", "open-loop", "--checkpoint", "ground-truth", "--data", str(data_dir),
               "--out", str(out), "--json", "--no-progress"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "open_loop.json").read_text())
    assert printed == written
    assert written["planning"]["l2_avg_3s"] == 0.0 and written["detection"]["ap50"] == 1.0
    assert written["info"]["checkpoint"] == "ground-truth"
    assert (out / "l2_per_waypoint.png").stat().st_size > 1000
    assert "Open-loop evaluation: 6 records" in (out / "open_loop.txt").read_text()


def test_tasks_and_limit_select_records_and_drop_stale_plots(data_dir, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["eval", "open-loop", "--checkpoint", "ground-truth", "--data", str(data_dir),
                 "--out", str(out), "--no-progress"]) == 0
    assert (out / "l2_per_waypoint.png").exists()
    rc = main(["eval", "open-loop", "--checkpoint", "ground-truth", "--data",
               str(data_dir / "train.json"), "--out", str(out), "--tasks", "qa", "--limit", "1",
               "--no-progress"])
    assert rc == 0
    assert "QA: exact-match accuracy 100.0% (1/1" in capsys.readouterr().out
    report = json.loads((out / "open_loop.json").read_text())
    assert report["num_records"] == 1 and report["planning"]["num_records"] == 0
    assert not (out / "l2_per_waypoint.png").exists()


def test_constant_velocity_plans_straight_at_the_prompt_speed(data_dir, tmp_path, capsys):
    # p0's expert drives 10 m/s straight; its prompt says 12 m/s, so the baseline's waypoint k
    # (t = k/2 s) is k m ahead of the expert's, p1's plan matches its expert exactly
    records = json.loads((data_dir / "train.json").read_text())
    (p0,) = [r for r in records if r["id"] == "p0"]
    prompt = p0["conversations"][0]
    assert "velocity is: (10.00,0.00)" in prompt["value"]
    prompt["value"] = prompt["value"].replace("(10.00,0.00)", "(12.00,0.00)")
    (data_dir / "faster.json").write_text(json.dumps(records))
    out = tmp_path / "report"
    rc = main(["eval", "open-loop", "--checkpoint", "constant-velocity", "--data",
               str(data_dir / "faster.json"), "--out", str(out), "--json", "--no-progress"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_records"] == 2 and report["info"]["checkpoint"] == "constant-velocity"
    assert report["planning"]["num_parsed"] == 2
    assert report["detection"]["num_records"] == report["qa"]["num_records"] == 0
    assert report["planning"]["l2_per_waypoint"] == pytest.approx([k / 2 for k in range(1, 9)])
    assert report["planning"]["l2_at_3s"] == pytest.approx(3.0)
    assert (out / "l2_per_waypoint.png").exists()


def test_constant_velocity_answers_planning_only(data_dir, tmp_path, capsys):
    rc = main(["eval", "open-loop", "--checkpoint", "constant-velocity", "--data",
               str(data_dir), "--tasks", "planning,qa", "--out", str(tmp_path / "o"),
               "--no-progress"])
    assert rc == 2 and "planning records only" in capsys.readouterr().err


@pytest.mark.parametrize("argv_tail, message", [
    (["--data", "{missing}"], "does not exist"),
    (["--data", "{data}", "--tasks", "captioning"], "unknown task"),
    (["--data", "{data}", "--limit", "0"], "--limit"),
    (["--data", "{data}", "--threshold", "1.5"], "threshold"),
])
def test_user_errors_exit_2_with_one_sentence(data_dir, tmp_path, capsys, argv_tail, message):
    argv = [a.format(missing=tmp_path / "nope", data=data_dir) for a in argv_tail]
    rc = main(["eval", "open-loop", "--checkpoint", "ground-truth", "--out",
               str(tmp_path / "o"), "--no-progress", *argv])
    assert rc == 2 and message in capsys.readouterr().err


def test_tiny_preset_planner_runs_and_reports_parse_failures(data_dir, tmp_path, capsys):
    # An untrained tiny model, answers capped at 8 tokens: a plan needs 16 numbers, so every
    # planning answer must fail to parse; the run must still finish with a full report.
    out = tmp_path / "report"
    rc = main(["eval", "open-loop", "--checkpoint", "tiny", "--data", str(data_dir),
               "--out", str(out), "--tasks", "planning,qa", "--limit", "3",
               "--max-new-tokens", "8", "--block-size", "4", "--steps-per-block", "1",
               "--commit-rule", "low_confidence_budget", "--threshold", "0.8",
               "--no-constrained", "--json", "--no-progress"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["planning"]["num_records"] == 2 and report["qa"]["num_records"] == 1
    assert report["parse_failure_rate"]["planning"] == 1.0
    assert report["planning"]["l2_at_1s"] is None
    assert report["info"]["decode"]["max_new_tokens"] == 8
    assert report["info"]["decode"]["block_size"] == 4
    assert report["info"]["decode"]["commit_rule"] == "low_confidence_budget"
    assert report["info"]["decode"]["threshold"] == 0.8
    assert report["info"]["decode"]["constrained"] is False
    assert report["qa"]["mean_predict_ms"] > 0
    assert not (out / "l2_per_waypoint.png").exists()


def test_bad_checkpoint_is_a_user_error(data_dir, tmp_path, capsys):
    rc = main(["eval", "open-loop", "--checkpoint", "no-such-preset", "--data", str(data_dir),
               "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 2 and "no-such-preset" in capsys.readouterr().err


def test_bad_records_in_data_are_counted_not_a_stop(data_dir, tmp_path, capsys):
    records = json.loads((data_dir / "train.json").read_text())
    gone = {**records[0], "id": "gone", "image": ["images/nope.png"]}
    records += [{"id": "empty", "task": "qa", "image": []}, gone, [1, 2]]
    (data_dir / "train.json").write_text(json.dumps(records))
    rc = main(["eval", "open-loop", "--checkpoint", "ground-truth", "--data", str(data_dir),
               "--out", str(tmp_path / "r"), "--json", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0
    report = json.loads(out)
    assert report["num_records"] == 9 and report["planning"]["num_records"] == 2
    assert report["planning"]["l2_avg_3s"] == 0.0                   # the good ones scored
    assert report["failures"] == {"planning": 1, "detection": 0, "qa": 1, "unknown": 1}
    assert "3 record(s) failed (planning 1, qa 1, unknown 1)" in err


def test_eval_exits_1_when_no_record_reaches_the_model(data_dir, tmp_path, capsys):
    for image in (data_dir / "images").iterdir():
        image.unlink()
    rc = main(["eval", "open-loop", "--checkpoint", "tiny", "--data", str(data_dir),
               "--out", str(tmp_path / "r"), "--max-new-tokens", "8", "--block-size", "4",
               "--no-constrained", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "every record failed before decoding" in err
    assert "does not exist" in err and (tmp_path / "r" / "open_loop.json").exists()
