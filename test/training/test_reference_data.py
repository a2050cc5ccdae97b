"""The reference repository's data format drops into training and open-loop evaluation
unchanged (issue 14): records written by hand as the reference's NAVSIM data is (no "task",
no "meta", extra keys, image paths from the working directory or --image-root /
data.image_root, a JSON list or JSONL), and the
one-sentence error a user gets for each malformed variant."""
import json
import re

import numpy as np
import pytest
from PIL import Image

from wamdiff2_core.apps.cli import main
from wamdiff2_core.training.config import RecipeError
from wamdiff2_core.training.data import load_samples

PLAN_PROMPT = ("Here is a front-view images from a driving vehicle: <image>\n"
               "Instruction: Please provide the planning trajectory for the ego car without "
               "reasons.\nThe navigation command is: left.\n"
               "The ego vehicle's current position is: (0.00, 0.00).\n"
               "The ego vehicle's current velocity is: (5.00, 0.00).\n"
               "The ego vehicle's current acceleration is: (0.50, -0.00).\n"
               "The trajectory of the ego vehicle is:")
RECORDS = [
    {"id": "43ebecce459052f2", "datasource": "navsim", "image": ["cams/CAM_F0/0001.png"],
     "conversations": [{"from": "human", "value": PLAN_PROMPT},
                       {"from": "gpt", "value": "2.26,-0.17,4.51,-0.30,6.75,-0.41,9.00,-0.50,"
                                                "11.24,-0.57,13.47,-0.62,15.70,-0.66,"
                                                "17.93,-0.69"}]},
    {"id": "5f0c2e1a9b3d7744", "datasource": "navsim", "image": "cams/CAM_F0/0002.png",
     "conversations": [{"from": "system", "value": "You are a driving assistant."},
                       {"from": "human", "value": "<image>\nIs the left lane free?"},
                       {"from": "gpt", "value": "yes"}]},
    {"id": "9a7b", "image": ["cams/CAM_F0/0002.png"],
     "conversations": [{"from": "human", "value": "<image>\nDetect the vehicles."},
                       {"from": "gpt", "value": '[{"bbox_2d": [10, 20, 110, 220], '
                                                '"label": "car"}]'}]},
    {"id": "eval-only", "image": ["cams/CAM_F0/0001.png"],
     "conversations": [{"from": "human", "value": "<image> What is ahead?"}]},
]


@pytest.fixture
def reference_data(tmp_path):
    """A records folder with images beside it, as the reference's data/ is laid out."""
    root = tmp_path / "navsim"
    (root / "cams" / "CAM_F0").mkdir(parents=True)
    rng = np.random.RandomState(3)
    for name in ("0001.png", "0002.png"):
        Image.fromarray((rng.rand(90, 160, 3) * 255).astype(np.uint8)).save(
            root / "cams" / "CAM_F0" / name)
    (root / "train.json").write_text(json.dumps(RECORDS, indent=1))
    (root / "train.jsonl").write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    return root


@pytest.mark.parametrize("name", ["train.json", "train.jsonl"])
def test_training_reads_reference_records_with_the_image_rule_of_predict(reference_data, name,
                                                                         tmp_path,
                                                                         monkeypatch):
    """A reference records file (no task): images under the working directory, as the
    reference's training data set and inference script open them, or under data.image_root;
    a data set directory: beside its records (the rule of predict and eval open-loop)."""
    monkeypatch.chdir(reference_data)
    samples = load_samples(reference_data / name)            # a records file as data.path
    assert [s.task for s in samples] == ["planning", "qa", "detection"]   # no "task" keys
    assert [s.id for s in samples] == ["43ebecce459052f2", "5f0c2e1a9b3d7744", "9a7b"]
    assert samples[0].images == (str(reference_data.resolve() / "cams/CAM_F0/0001.png"),)
    assert samples[0].prompt == PLAN_PROMPT
    assert [s.id for s in load_samples(reference_data / name, tasks=("planning",))] == [
        "43ebecce459052f2"]
    monkeypatch.chdir(tmp_path)                               # elsewhere: say where, and why
    with pytest.raises(RecipeError, match=re.escape(
            f"names a missing image {tmp_path.resolve() / 'cams/CAM_F0/0001.png'} (image "
            f"paths are relative to {tmp_path.resolve()} (the working directory: records "
            f"without a task are in the reference's layout")):
        load_samples(reference_data / name)
    assert load_samples(reference_data / name, images_under=reference_data) == samples
    assert load_samples(reference_data, split=name) == samples          # dir + split
    with pytest.raises(RecipeError, match="data.image_root .*nowhere is not a folder"):
        load_samples(reference_data / name, images_under=tmp_path / "nowhere")


def test_a_few_training_steps_on_reference_records(reference_data, tmp_path):
    from wamdiff2_core.training.config import load_recipe
    from wamdiff2_core.training.engine import train

    recipe = load_recipe("config/training/stage0_ar.yaml", [
        f"data.path={reference_data / 'train.jsonl'}", f"data.image_root={reference_data}",
        "train.steps=2", "train.global_batch=3",
        "train.micro_batch=3", "output.progress=false", "output.save_every=2",
        f"output.dir={tmp_path / 'run'}"])
    final = train(recipe, log=lambda *a: None)
    assert (final / "model.safetensors").exists()


def test_open_loop_scores_reference_records(reference_data, tmp_path, capsys):
    out = tmp_path / "report"
    # records that name no task are the reference's layout: their images are under the
    # working directory unless --image-root says where (docs/evaluation.md, "Image paths")
    assert main(["eval", "open-loop", "--checkpoint", "ground-truth", "--data",
                 str(reference_data / "train.jsonl"), "--image-root", str(reference_data),
                 "--out", str(out), "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_records"] == 4 and report["skipped_tasks"] == {"None": 1}
    assert [report[t]["num_records"] for t in ("planning", "qa", "detection")] == [1, 1, 1]
    assert report["planning"]["l2_avg_3s"] == 0.0
    assert report["qa"]["accuracy"] == 1.0
    assert report["detection"]["ap50"] == 1.0


def test_open_loop_answers_reference_records_from_their_own_turn(reference_data):
    from wamdiff2_core.evaluation.open_loop import evaluate_open_loop
    from wamdiff2_core.evaluation.predictors import planner_predictor
    from wamdiff2_core.planner import Planner
    from wamdiff2_core.tasks import read_records

    records = read_records(reference_data / "train.json")
    report = evaluate_open_loop(records, planner_predictor(Planner.from_pretrained()),
                                reference_data, progress=False)
    assert [report.tasks[t]["num_records"] for t in ("planning", "qa", "detection")] == [1, 1, 1]
    assert report.skipped == {"None": 1}            # the record without an answer


def _variant(root, text, name="bad.json"):
    (root / name).write_text(text)
    return root / name


def _good(**change):
    record = json.loads(json.dumps(RECORDS[0]))
    record.update(change)
    return record


#: eval's exit code for each variant: 2, a file that is not a records file (one sentence);
#: 1, every record failed and is counted, as predict counts it (nothing left to score)
BAD_FILE, BAD_RECORDS = 2, 1


@pytest.mark.parametrize("name, text, message, eval_rc", [
    ("bad.json", "[{\"id\": 1,", "bad.json is not valid JSON", BAD_FILE),
    ("bad.jsonl", json.dumps(RECORDS[0]) + "\n{not json}\n",
     "bad.jsonl line 2 is not valid JSON", BAD_FILE),
    ("bad.json", "", "bad.json holds no records", BAD_FILE),
    ("bad.json", "[]", "bad.json holds no records", BAD_FILE),
    ("bad.json", json.dumps({"records": RECORDS}),
     "must hold a JSON list of records or one record per line, got a JSON object", BAD_RECORDS),
    ("bad.json", json.dumps([RECORDS[0], ["x"]]), "record 1 of .* is malformed: record must be "
                                                  "a JSON object", None),
    ("bad.json", json.dumps([_good(conversations=[])]), "non-empty 'conversations' list",
     BAD_RECORDS),
    ("bad.json", json.dumps([_good(conversations=[{"from": "user", "value": "<image> hi"}])]),
     r"conversations must be \[system\?, human, gpt\?\]", BAD_RECORDS),
    ("bad.json", json.dumps([_good(image=[])]), "1 '<image>' placeholder\\(s\\) but the record "
                                                "has 0 image", BAD_RECORDS),
    ("bad.json", json.dumps([_good(image=[7])]), "image must be a list of non-empty str paths",
     BAD_RECORDS),
    ("bad.json", json.dumps([_good(image=["cams/CAM_F0/9999.png"])]),
     "names a missing image .*9999.png", BAD_RECORDS),
])
def test_each_malformed_variant_is_one_sentence(reference_data, tmp_path, capsys, name, text,
                                                message, eval_rc):
    """Training refuses a bad records file in one sentence; eval refuses a file that is no
    records file in one sentence, and counts bad records as failures (a file of nothing
    else exits 1 saying so; one good record beside a bad one is scored: None)."""
    path = _variant(reference_data, text, name)
    with pytest.raises(RecipeError, match=message):
        load_samples(path, images_under=reference_data)
    rc = main(["eval", "open-loop", "--checkpoint", "ground-truth", "--data", str(path),
               "--image-root", str(reference_data), "--out", str(tmp_path / "r"),
               "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    if eval_rc == BAD_FILE:
        assert rc == 2, err
        lines = [line for line in err.splitlines() if not line.startswith("note:")]
        assert len(lines) == 1 and "error:" in lines[0], err
        assert re.search(message, err), err
    elif eval_rc == BAD_RECORDS:
        assert rc == 1, err
        assert "1 record(s) failed" in err and "every record failed" in err, err
    else:
        assert rc == 0, err
        assert "1 record(s) failed" in err, err
