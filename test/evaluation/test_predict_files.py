"""What a predictions run and scoring read back is a user's file like any other: parts that
are not prediction items of the input, a FIFO or /dev/zero where a part or an image should
be, and prediction items whose fields are the wrong kind are refused in one sentence or
counted as failures, never a traceback or a hang."""
import json
import os
from pathlib import Path

import pytest
from hostile_files import hostile
from PIL import Image

from wamdiff2_core.evaluation.open_loop import score_predictions
from wamdiff2_core.evaluation.open_loop_report import format_summary
from wamdiff2_core.evaluation.predict_run import PredictSettings, run_predict
from wamdiff2_core.evaluation.prediction_parts import MANIFEST, PartsStore
from wamdiff2_core.evaluation.predictions import item_record, prediction_item
from wamdiff2_core.evaluation.requests import MAX_RECORD_CHARS, check_text
from wamdiff2_core.image_files import ImageFileError, image_size, open_rgb

RECORDS = [{"id": f"r{i}", "image": ["a.png"], "conversations": [
    {"from": "human", "value": "What is ahead? <image>"}, {"from": "gpt", "value": "a car"}]}
    for i in range(3)]
MANIFEST_OF_RUN = {"input": "x", "decode": {"steps": 2}}


def parts_of(tmp_path: Path) -> Path:
    """An unfinished run's parts folder for RECORDS (manifest written, one good part)."""
    store = PartsStore(tmp_path / "p.json", MANIFEST_OF_RUN)
    store.open(False, RECORDS)
    store.write(0, [prediction_item(RECORDS[0], 0, "a car", extra={"task": "qa"})])
    return store.dir


def resume(tmp_path: Path) -> str:
    """The one sentence a resume is refused with (nothing is decoded: no planner needed)."""
    with pytest.raises(ValueError) as info:
        run_predict(None, RECORDS, tmp_path, tmp_path / "p.json",
                    PredictSettings(resume=True, progress=False), MANIFEST_OF_RUN)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


FORGED = {
    "a list of numbers": [1],
    "a string": "forged",
    "a forged item": [{"id": "r1", "prediction": "forged"}],
    "another input's item": [{**prediction_item(RECORDS[1], 1, "x"), "id": "other"}],
    "a position outside the input": [prediction_item(RECORDS[1], 7, "x")],
    "a prediction that is not text": [{**prediction_item(RECORDS[1], 1, "x"),
                                       "prediction": 5}],
}


@pytest.mark.parametrize("kind", sorted(FORGED))
def test_a_part_that_is_not_this_inputs_items_is_refused(tmp_path, kind):
    parts = parts_of(tmp_path)
    (parts / "rank00000-forged-000001.json").write_text(json.dumps(FORGED[kind]))
    message = resume(tmp_path)
    assert "rank00000-forged-000001.json" in message and "remove that folder" in message
    assert not (tmp_path / "p.json").exists()


def test_the_good_part_alone_is_read_back(tmp_path):
    parts = parts_of(tmp_path)
    done = PartsStore(tmp_path / "p.json", MANIFEST_OF_RUN).done(RECORDS)
    assert list(done) == [0] and done[0]["prediction"] == "a car"
    assert sorted(p.name for p in parts.iterdir())[0] == MANIFEST


@pytest.mark.parametrize("kind", ["fifo", "dev zero", "directory", "deep"])
def test_a_part_or_manifest_that_is_no_json_file_is_one_sentence(tmp_path, kind):
    parts = parts_of(tmp_path)
    target = parts / ("rank00000-bad-000001.json" if kind != "deep" else MANIFEST)
    hostile(target, kind)
    message = resume(tmp_path)
    assert target.name in message
    expected = {"fifo": "FIFO", "dev zero": "character device", "directory": "directory",
                "deep": "nests"}[kind]
    assert expected in message


def test_a_fifo_image_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "cam.png"
    os.mkfifo(fifo)                          # opening it blocking would wait for a writer
    for read in (open_rgb, image_size):
        with pytest.raises(ImageFileError, match="FIFO"):
            read(fifo)
    Image.new("RGB", (8, 4)).save(tmp_path / "ok.png")
    assert image_size(tmp_path / "ok.png") == (8, 4)
    with pytest.raises(ImageFileError, match="directory"):
        open_rgb(tmp_path)


def test_text_beyond_the_limit_is_refused_naming_the_field():
    huge = {"id": "h", "conversations": [{"from": "human", "value": "x" * (MAX_RECORD_CHARS + 1)}]}
    with pytest.raises(ValueError, match=r"conversations\[0\]\.value: 1,000,001\), more than"):
        check_text(huge)
    check_text(RECORDS[0])
    item = prediction_item(huge, 0, "", "too long")
    assert len(item["question"]) == MAX_RECORD_CHARS            # the output stays bounded


@pytest.mark.parametrize("image", [5, {"path": "a.png"}, [3], None])
def test_a_detection_item_whose_image_is_no_path_is_a_failure(tmp_path, image):
    truth = '[{"bbox_2d": [100, 100, 300, 300], "label": "car"}]'
    items = [{"id": "d", "image": image, "prediction": truth, "ground_truth": truth},
             {"id": "q", "image": [], "prediction": "two", "ground_truth": "two"}]
    report = score_predictions([item_record(i) for i in items], items, tmp_path)
    assert report.failures["detection"] == 1 and report.tasks["qa"]["accuracy"] == 1.0
    assert report.first_failure.startswith("record 'd'")
    assert report.tasks["detection"]["num_records"] == 0
    text = format_summary(report)                      # the printed summary says so too
    assert "Failed records (not scored): detection x1; first: record 'd'" in text


def test_a_ground_truth_beyond_the_limit_is_a_failure_not_parsed(tmp_path):
    huge = "1.00," * (MAX_RECORD_CHARS // 5 + 1)
    items = [{"id": "h", "image": [], "prediction": "x", "ground_truth": huge},
             {"id": "q", "image": [], "prediction": "two", "ground_truth": "two"}]
    report = score_predictions([item_record(i) for i in items], items, tmp_path)
    assert report.failures["unknown"] == 1 and "characters long" in report.first_failure
    record = {"id": "r", "conversations": [{"from": "human", "value": "q"},
                                           {"from": "gpt", "value": huge}]}
    report = score_predictions([record, item_record(items[1])], items, tmp_path)
    assert report.failures["unknown"] == 1 and "characters of text" in report.first_failure
    assert report.tasks["qa"]["accuracy"] == 1.0
