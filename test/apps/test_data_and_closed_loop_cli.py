"""`wamdiff2 data generate` and `wamdiff2 eval closed-loop` through the real CLI."""
from __future__ import annotations

import argparse
import json

from wamdiff2_core.apps.cli import build_parser, main
from wamdiff2_core.apps.common import subgroup


def test_eval_group_is_shared(capsys):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    group = subgroup(sub, "eval")
    assert subgroup(sub, "eval") is group and sub._wamdiff2_eval is group
    choices = build_parser()._subparsers._group_actions[0].choices
    eval_choices = choices["eval"]._subparsers._group_actions[0].choices
    assert {"closed-loop", "open-loop"} <= set(eval_choices)
    assert "generate" in choices["data"]._subparsers._group_actions[0].choices


def test_data_generate_cli(tmp_path, capsys):
    out = tmp_path / "data"
    code = main(["data", "generate", "--out", str(out), "--episodes", "1", "--seed", "2",
                 "--frames", "2", "--scenarios", "racetrack", "--tasks", "planning,qa",
                 "--resolution", "128x72", "--json", "--no-progress"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["frames"] == 2 and summary["records"] == {"planning": 2, "qa": 2}
    camera = json.loads((out / "camera.json").read_text())
    assert (camera["width"], camera["height"]) == (128, 72)
    # a finished directory is not overwritten; a bad resolution is a one-line user error
    assert main(["data", "generate", "--out", str(out), "--episodes", "1",
                 "--no-progress"]) == 2
    assert "already holds" in capsys.readouterr().err
    assert main(["data", "generate", "--out", str(tmp_path / "x"), "--episodes", "1",
                 "--resolution", "big", "--no-progress"]) == 2
    assert "resolution" in capsys.readouterr().err


def test_eval_closed_loop_cli(tmp_path, capsys):
    out = tmp_path / "report"
    code = main(["eval", "closed-loop", "--planner", "constant-velocity", "--episodes", "1",
                 "--scenarios", "racetrack", "--duration", "3", "--seed", "5",
                 "--out", str(out), "--json", "--no-progress"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads((out / "closed_loop.json").read_text())
    assert report["planner"] == "constant-velocity" and len(report["episodes"]) == 1
    assert 0.0 <= report["score"] <= 1.0 and "fallback" in report
    assert (out / "closed_loop.txt").exists() and (out / "scores.png").exists()
    assert (out / "episode_000_racetrack.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["eval", "closed-loop", "--planner", "oracle", "--episodes", "1",
                 "--out", str(out), "--no-progress"]) == 2
    assert "oracle" in capsys.readouterr().err
    # decoding options: checked, and only for checkpoint planners
    assert main(["eval", "closed-loop", "--planner", "constant-velocity", "--threshold", "2",
                 "--out", str(out), "--no-progress"]) == 2
    assert "threshold" in capsys.readouterr().err
    assert main(["eval", "closed-loop", "--planner", "expert", "--commit-rule",
                 "low_confidence_budget", "--out", str(out), "--no-progress"]) == 2
    assert "checkpoint planners" in capsys.readouterr().err
