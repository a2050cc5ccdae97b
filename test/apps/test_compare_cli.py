"""`wamdiff2 eval compare` through the real CLI: a planner against itself differs by exactly
zero, episodes are kept and resumed, bad settings are refused, open loop pairs records."""
from __future__ import annotations

import json

import pytest

from wamdiff2_core.apps.cli import main
from wamdiff2_core.types import bundled_checkpoint_path

BUNDLE = f"checkpoint:{bundled_checkpoint_path()}"
SHORT = ["--seed", "7300", "--duration", "2", "--scenarios", "intersection,highway",
         "--no-progress"]


def _compare(out, *args) -> dict:
    assert main(["eval", "compare", *args, "--out", str(out), *SHORT]) == 0
    return json.loads((out / "compare.json").read_text())


def test_the_bundle_against_itself_differs_by_exactly_zero(tmp_path, capsys):
    # B names the rule the bundle recommends: other settings (so it is driven apart), the
    # same decoding (so every episode must come out the same)
    report = _compare(tmp_path / "self", "--a", BUNDLE, "--b", BUNDLE, "--episodes", "2",
                      "--b-option", "commit-rule=low_confidence_frontier",
                      "--b-option", "threshold=0.95", "--workers", "2")
    diff = report["score"]["difference"]
    assert (diff["mean"], diff["low"], diff["high"], diff["sd"]) == (0.0, 0.0, 0.0, 0.0)
    assert report["score"]["verdict"] == "no difference resolved"
    assert report["score"]["needed_to_resolve"] is None
    assert [e["difference"] for e in report["per_episode"]] == [0.0, 0.0]
    assert all(t["difference"]["mean"] == 0.0 for t in report["terms"].values())
    assert report["info"]["a"]["episodes_file"] != report["info"]["b"]["episodes_file"]
    assert report["info"]["episodes_run"] == 4                 # both were driven
    assert "verdict (score): no difference resolved (B - A = +0.000 [+0.000, +0.000], 2 " \
           "episodes); fewer than 10 episodes: the interval is too narrow to trust; B and A " \
           "did not differ" in capsys.readouterr().out


def test_episodes_are_kept_resumed_and_extended(tmp_path):
    out = tmp_path / "run"
    first = _compare(out, "--a", "expert", "--b", "constant-velocity", "--episodes", "2",
                     "--workers", "1")
    files = sorted(out.glob("episodes-*.jsonl"))
    assert len(files) == 2 and all(len(f.read_text().splitlines()) == 2 for f in files)
    kept = {f: f.read_text().splitlines() for f in files}
    # without --resume the stored episodes are not overwritten
    assert main(["eval", "compare", "--a", "expert", "--b", "constant-velocity",
                 "--episodes", "2", "--out", str(out), *SHORT]) == 2
    # a torn line (a killed run) is dropped; --resume drives only the missing episodes
    with open(files[0], "a") as handle:
        handle.write('{"index": 2, "epis')
    more = _compare(out, "--a", "expert", "--b", "constant-velocity", "--episodes", "3",
                    "--resume", "--workers", "2")
    assert more["info"]["episodes_run"] == 2 and more["info"]["episodes_kept"] == 4
    for f in files:
        lines = f.read_text().splitlines()
        assert lines[:2] == kept[f] and len(lines) == 3
    assert more["per_episode"][:2] == first["per_episode"]


@pytest.mark.parametrize("args, reason", [
    (["--b-option", "nonsense=1"], "unknown setting 'nonsense'"),
    (["--b-option", "candidates"], "takes KEY=VALUE"),
    (["--b-option", "candidates=many"], "setting candidates='many'"),
    (["--b-option", "candidates=99"], "candidates must be an integer in 1..16"),
    (["--b-option", "commit-rule=sometimes"], "commit"),
    (["--b-option", "candidates=8"], "apply to checkpoint planners, not 'expert'"),
    (["--episodes", "0"], "--episodes must be at least 1"),
    (["--workers", "0"], "--workers must be at least 1"),
])
def test_bad_settings_are_one_sentence(tmp_path, capsys, args, reason):
    code = main(["eval", "compare", "--a", "constant-velocity", "--b", "expert", *args,
                 "--out", str(tmp_path / "bad"), *SHORT])
    assert code == 2
    err = capsys.readouterr().err
    assert reason in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_open_loop_pairs_two_predictions_files_by_record(data_dir, tmp_path, capsys):
    from eval_data import straight

    from wamdiff2_core.tasks import format_waypoints, record_prompt_and_answer

    records = json.loads((data_dir / "train.json").read_text())
    truth = [{"id": r["id"], "prediction": record_prompt_and_answer(r)[1]} for r in records]
    worse = [dict(item) for item in truth]
    for item, record in zip(worse, records):
        if record["task"] == "planning":                 # 1 m off at every waypoint
            item["prediction"] = format_waypoints(straight(
                10.0 if record["id"] == "p0" else 5.0, lateral_m=1.0))
    paths = {}
    for name, items in (("truth", truth), ("worse", worse)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(items))
    out = tmp_path / "open"
    assert main(["eval", "compare", "--a", f"predictions:{paths['truth']}",
                 "--b", f"predictions:{paths['worse']}", "--data", str(data_dir),
                 "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "compare.json").read_text())
    planning = report["tasks"]["planning"]
    assert planning["l2_mean"]["difference"]["mean"] == pytest.approx(1.0)
    assert planning["parse_failure"]["difference"]["mean"] == 0.0
    assert report["tasks"]["qa"]["accuracy"]["difference"] == {
        "mean": 0.0, "low": 0.0, "high": 0.0, "n": 2, "sd": 0.0, "level": 0.95}
    assert "detection" in report["not_paired"]
    # both plans are exactly 1 m worse: resolved with n = 2, A (the truth) better
    assert planning["l2_mean"]["verdict"] == "A better"
    assert f"(planning l2_mean): A better, predictions:{paths['truth']} (B - A = +1.000 " \
        "[+1.000, +1.000], 2 records); fewer than 10 records" in capsys.readouterr().out
