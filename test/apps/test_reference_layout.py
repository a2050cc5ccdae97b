"""Evaluation files as a researcher has them (test/fixtures/reference_layout): an input in the
reference's layout (image paths from its repository's root; a system turn, a record without
conversations, a missing image, a question record) through `predict` and `eval open-loop
--predictions`, from the reference's working directory and from elsewhere with --image-root;
and the predictions the reference's inference script writes (merged and per rank) scored."""
import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest
from predict_inputs import without_timing

from wamdiff2_core.apps.cli import main
from wamdiff2_core.evaluation.predictions import REFERENCE_KEYS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reference_layout"
INPUT = "eval_with_missing_image.json"
SYSTEM_ID, EMPTY_ID, MISSING_ID = "5a0c7e2b91d34f68", "9e1f4b6a0c2d7e35", "f3b8a1d6c9e24071"


@contextlib.contextmanager
def working_directory(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def scored(capsys, *argv) -> dict:
    rc, out, err = run(capsys, "eval", "open-loop", "--json", "--no-progress", *argv)
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def reference_root(tmp_path_factory) -> Path:
    """A copy of the fixture: the reference repository's root, as its scripts run in it."""
    root = tmp_path_factory.mktemp("reference") / "WAM-Diff2"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return root


@pytest.fixture(scope="module")
def from_reference_root(reference_root, tmp_path_factory):
    """`predict` run in the reference's working directory, as infer_gpu.sh would be."""
    out = tmp_path_factory.mktemp("ours") / "predictions.json"
    with working_directory(reference_root):
        rc = main(["predict", "--input", INPUT, "--output", str(out), "--batch-size", "4",
                   "--no-progress"])
    assert rc == 0
    return out, json.loads(out.read_text())


def test_the_fixture_is_written_as_the_reference_writes_it():
    outputs = FIXTURE / "outputs"
    ranks = [json.loads((outputs / f"predictions_rank{r}.json").read_text()) for r in (0, 1)]
    merged_text = (outputs / "predictions.json").read_text()
    merged = json.loads(merged_text)
    assert merged == sorted(ranks[0] + ranks[1], key=lambda item: str(item.get("id", "")))
    assert merged_text == json.dumps(merged, indent=4, ensure_ascii=False)   # no final \n
    assert not merged_text.endswith("\n")
    records = json.loads((FIXTURE / "eval.json").read_text())
    assert [item["id"] for item in ranks[0] + ranks[1]] == [r["id"] for r in records]
    for item in merged:
        keys = list(item)
        assert keys[:6] == list(REFERENCE_KEYS) and keys[6:] in ([], ["error"])
        if "error" in item:
            assert item["prediction"] == "" and item["ground_truth"] == ""
    system = next(item for item in merged if item["id"] == SYSTEM_ID)
    assert system["question"].startswith("You are an autonomous driving assistant")
    assert next(item for item in merged if item["id"] == EMPTY_ID)["question"] == ""
    for record in records:
        for image in record["image"]:
            assert (FIXTURE / image).is_file() and image.startswith("data/opensource/")


def test_predict_in_the_reference_working_directory_answers_each_record(from_reference_root):
    _, items = from_reference_root
    by_id = {item["id"]: item for item in items}
    assert list(by_id) == [r["id"] for r in json.loads((FIXTURE / INPUT).read_text())]
    assert "does not exist" in by_id[MISSING_ID]["error"]
    assert by_id[MISSING_ID]["ground_truth"]                      # ours keeps it
    assert "conversations" in by_id[EMPTY_ID]["error"] and by_id[EMPTY_ID]["question"] == ""
    system = by_id[SYSTEM_ID]
    assert "error" not in system and system["question"].startswith("You are an autonomous")
    assert len(system["wamdiff2"]["parsed"]["waypoints"]) == 8
    assert sum("error" in item for item in items) == 2


def test_its_predictions_are_scored_with_and_without_the_input(from_reference_root,
                                                              reference_root, tmp_path,
                                                              capsys):
    out, _ = from_reference_root
    with working_directory(reference_root):
        joined = scored(capsys, "--predictions", out, "--data", INPUT, "--out", tmp_path / "a")
        alone = scored(capsys, "--predictions", out, "--out", tmp_path / "b")
    for report in (joined, alone):
        assert report["num_records"] == 7
        assert report["planning"]["num_records"] == 4              # the missing image counts
        assert report["planning"]["num_parse_failures"] == 1
        assert report["planning"]["num_parsed"] == 3
        assert report["planning"]["l2_mean"] is not None
        assert report["qa"]["num_records"] == 1 and report["detection"]["num_records"] == 1
        assert report["detection"]["map"] is not None
        assert report["failures"] == {"planning": 1, "detection": 0, "qa": 0, "unknown": 1}
    assert MISSING_ID in joined["first_failure"] or EMPTY_ID in joined["first_failure"]


def test_elsewhere_image_root_gives_the_same_answers_and_without_it_every_record_fails(
        from_reference_root, reference_root, tmp_path, capsys):
    _, expected = from_reference_root
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with working_directory(elsewhere):
        rc, _, err = run(capsys, "predict", "--input", reference_root / INPUT, "--output",
                         "p.json", "--batch-size", "4", "--image-root", reference_root,
                         "--no-progress")
        assert rc == 0 and f"relative to {reference_root} (given by --image-root)" in err
        assert "2 of 7 records failed" in err and "p.json" in err
        items = json.loads(Path("p.json").read_text())
        assert without_timing(items) == without_timing(expected)
        report = scored(capsys, "--predictions", "p.json", "--data", reference_root / INPUT,
                        "--image-root", reference_root, "--out", tmp_path / "r")
        assert report["failures"]["planning"] == 1 and report["planning"]["num_parsed"] == 3
        rc, _, err = run(capsys, "predict", "--input", reference_root / INPUT, "--output",
                         "q.json", "--no-progress")
    assert rc == 1
    assert f"relative to {elsewhere} (the working directory" in err
    assert "every record failed" in err and "does not exist" in err
    assert all("error" in item for item in json.loads((elsewhere / "q.json").read_text()))


def test_the_reference_scripts_predictions_are_scored_merged_or_per_rank(reference_root,
                                                                        tmp_path, capsys):
    outputs = reference_root / "outputs"
    ranks = [outputs / f"predictions_rank{r}.json" for r in (0, 1)]
    with working_directory(reference_root):
        alone = scored(capsys, "--predictions", outputs / "predictions.json",
                       "--out", tmp_path / "a")
        joined = scored(capsys, "--predictions", outputs / "predictions.json", "--data",
                        "eval.json", "--out", tmp_path / "b")
        by_rank = scored(capsys, "--predictions", *ranks, "--data", "eval.json",
                         "--out", tmp_path / "c")
        rc, _, err = run(capsys, "eval", "open-loop", "--predictions", ranks[0], "--data",
                         "eval.json", "--out", tmp_path / "d")
    assert rc == 2 and "no prediction for 3 of the 6 records" in err and "_rank0" in err
    # Alone, a failed item has no ground truth left (the reference writes ""): its task is
    # unknown. Joined to the input, its task and ground truth are the record's.
    assert alone["failures"] == {"planning": 0, "detection": 0, "qa": 0, "unknown": 2}
    assert alone["planning"]["num_records"] == 2 and alone["planning"]["num_parsed"] == 2
    assert joined["failures"] == {"planning": 1, "detection": 0, "qa": 0, "unknown": 1}
    assert joined["planning"]["num_records"] == 3
    assert joined["planning"]["num_parse_failures"] == 1
    for report in (alone, joined):
        assert report["qa"]["accuracy"] == 1.0
        assert report["detection"]["num_gt"] == 2 and report["detection"]["num_pred"] == 1
        assert report["planning"]["l2_mean"] == pytest.approx(0.06, abs=0.05)

    def metrics(report):
        return {task: {k: v for k, v in report[task].items() if k != "intervals"}
                for task in ("planning", "detection", "qa")}
    assert metrics(by_rank) == metrics(joined) and by_rank["failures"] == joined["failures"]


def test_eval_compare_reads_the_reference_layout_as_eval_open_loop_does(reference_root,
                                                                         tmp_path, capsys):
    """`eval compare --data` finds the images where `eval open-loop` does: the working
    directory for records without a task, or --image-root; both give one report."""
    predictions = reference_root / "outputs" / "predictions.json"
    argv = ["eval", "compare", "--a", f"predictions:{predictions}", "--b",
            f"predictions:{predictions}", "--data", reference_root / "eval.json", "--json",
            "--no-progress"]
    with working_directory(reference_root):
        rc, out, err = run(capsys, *argv, "--out", tmp_path / "in_root")
    assert rc == 0, err
    assert f"relative to {reference_root} (the working directory" in err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with working_directory(elsewhere):
        rc, given, err = run(capsys, *argv, "--image-root", reference_root,
                             "--out", tmp_path / "given")
    assert rc == 0, err
    assert f"relative to {reference_root} (given by --image-root)" in err
    in_root, given = json.loads(out), json.loads(given)
    assert in_root["tasks"] == given["tasks"] and in_root["records"] == 6
    difference = in_root["tasks"]["planning"]["l2_mean"]["difference"]
    assert difference["mean"] == 0.0 and difference["n"] == 2
    # the record whose prediction failed is counted per side, not reported as a task "None"
    assert in_root["not_scored"] == {"a": 1, "b": 1} and "None" not in in_root["not_paired"]
