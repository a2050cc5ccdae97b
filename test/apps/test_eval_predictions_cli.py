"""`wamdiff2 eval open-loop` and predictions files: eval that decodes (through predict, batched,
on two torchrun processes too) equals eval of a predictions file, and a file in the shape the
reference's inference script writes is scored as well."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from predict_inputs import free_port, write_reference_file

from wamdiff2_core.apps.cli import main
from wamdiff2_core.types import bundled_checkpoint_path

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = str(bundled_checkpoint_path())
TIMING = ("mean_predict_ms",)


def metrics(report: dict) -> dict:
    """The task metrics of a report, without timings."""
    return {task: {k: v for k, v in report[task].items() if k not in TIMING}
            for task in ("planning", "detection", "qa")}


def evaluate(capsys, *argv) -> dict:
    assert main(["eval", "open-loop", "--json", "--no-progress", *map(str, argv)]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    """eval that decodes: the bundled model on the tiny data set, batch 4."""
    from eval_data import write_data_dir

    root = tmp_path_factory.mktemp("eval")
    data = write_data_dir(root / "data")
    out = root / "decoded"
    assert main(["eval", "open-loop", "--checkpoint", BUNDLED, "--data", str(data), "--out",
                 str(out), "--batch-size", "4", "--no-progress"]) == 0
    return data, out, json.loads((out / "open_loop.json").read_text())


def test_eval_writes_its_predictions_and_scores_them(decoded):
    _, out, report = decoded
    items = json.loads((out / "predictions.json").read_text())
    assert [i["id"] for i in items] == ["p0", "p1", "d0", "d1", "q0", "q1"]
    assert report["info"]["predictions"] == str(out / "predictions.json")
    assert report["info"]["predict"]["batch_size"] == 4
    assert report["planning"]["num_parsed"] == 2 and report["qa"]["mean_predict_ms"] > 0


def test_eval_of_the_predictions_file_equals_eval_that_decodes(decoded, tmp_path, capsys):
    data, out, report = decoded
    predict = tmp_path / "p.json"
    assert main(["predict", "--checkpoint", BUNDLED, "--input", str(data), "--output",
                 str(predict), "--no-progress"]) == 0
    capsys.readouterr()
    scored = evaluate(capsys, "--predictions", predict, "--data", data, "--out", tmp_path / "o")
    assert metrics(scored) == metrics(report)
    alone = evaluate(capsys, "--predictions", predict, "--out", tmp_path / "o2")
    for key in ("num_parsed", "l2_per_waypoint", "l2_avg_3s"):
        assert alone["planning"][key] == pytest.approx(report["planning"][key], abs=1e-9)
    assert alone["planning"]["collision_rate"] is None        # no other vehicles without data
    assert alone["qa"]["accuracy"] == report["qa"]["accuracy"]
    assert alone["qa"]["in_answer_set_rate"] is None          # the answer sets are in the data
    assert alone["detection"]["ap50"] == report["detection"]["ap50"]  # sizes from the file


def test_eval_on_two_processes_equals_one(decoded, tmp_path):
    data, out, report = decoded
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2",
         "--master-port", str(free_port()), "-m", "wamdiff2_core.cli", "eval", "open-loop",
         "--checkpoint", BUNDLED, "--data", str(data), "--out", str(tmp_path / "two"),
         "--batch-size", "4", "--no-progress", "--json"],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
        timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads(proc.stdout)                               # rank 0 alone prints
    assert two["info"]["predict"]["world"] == 2
    assert metrics(two) == metrics(report)


def test_a_predictions_file_made_by_the_reference_script_is_scored(tmp_path, capsys):
    path = write_reference_file(tmp_path, bad=())
    ours = tmp_path / "ours.json"
    assert main(["predict", "--input", str(path), "--output", str(ours), "--image-root",
                 str(tmp_path), "--no-progress"]) == 0
    capsys.readouterr()
    reference = [{k: v for k, v in item.items() if k != "wamdiff2"}
                 for item in json.loads(ours.read_text())]
    failed = reference[1]                     # the reference's shape of a failed record
    failed.update(prediction="", ground_truth="", error="CUDA out of memory")
    reference.sort(key=lambda item: str(item["id"]))              # as the reference merges
    ref_file = tmp_path / "reference_predictions.json"
    ref_file.write_text(json.dumps(reference, indent=4, ensure_ascii=False))
    with_data = evaluate(capsys, "--predictions", ref_file, "--data", path, "--image-root",
                         tmp_path, "--out", tmp_path / "a")
    mine = evaluate(capsys, "--predictions", ours, "--data", path, "--image-root", tmp_path,
                    "--out", tmp_path / "b")
    assert with_data["num_records"] == mine["num_records"] == 18
    assert with_data["planning"]["num_parse_failures"] == 1       # the failed record
    assert with_data["failures"] == {"planning": 1, "detection": 0, "qa": 0}
    assert "CUDA out of memory" in with_data["first_failure"]
    assert mine["planning"]["num_parse_failures"] == 0
    alone = evaluate(capsys, "--predictions", ref_file, "--image-root", tmp_path,
                     "--out", tmp_path / "c")
    assert alone["skipped_tasks"] == {}                            # no ground truth left:
    assert alone["failures"]["unknown"] == 1                       # its task is unknown
    assert alone["planning"]["num_records"] == 5 and alone["qa"]["num_records"] == 6


def test_predictions_problems_are_one_sentence(decoded, tmp_path, capsys):
    data, out, _ = decoded
    items = json.loads((out / "predictions.json").read_text())
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(items[:4]))
    cases = [(["--predictions", partial, "--data", data], "no prediction for 2 of the 6"),
             (["--predictions", tmp_path / "nope.json"], "nope.json does not exist"),
             (["--checkpoint", BUNDLED], "needs --data")]
    for argv, message in cases:
        rc = main(["eval", "open-loop", "--out", str(tmp_path / "o"), *map(str, argv)])
        assert rc == 2 and message in capsys.readouterr().err
