"""The pieces of a predictions run: prompt lengths from image headers, the batch plan, the
reference's predictions objects and matching them back to records."""
import json

import numpy as np
import pytest
from PIL import Image

from wamdiff2_core import tasks
from wamdiff2_core.evaluation.batch_decode import plan_batches, prepare
from wamdiff2_core.evaluation.predictions import (REFERENCE_KEYS, item_record, match,
                                                  prediction_item, read_predictions)
from wamdiff2_core.evaluation.truth import record_truth
from wamdiff2_core.planner import Planner


@pytest.fixture(scope="module")
def planner():
    return Planner.from_pretrained()


@pytest.mark.parametrize("sizes", [[(320, 180)], [(161, 93)], [(64, 64), (500, 300)]])
def test_prompt_tokens_from_sizes_equal_the_encoded_batch(planner, sizes):
    processor = planner.model.processor
    prompt = tasks.planning_prompt("left", (3.25, 0.1), (-0.5, 0.0))
    prompt = prompt.replace(tasks.IMAGE_PLACEHOLDER,
                            " ".join([tasks.IMAGE_PLACEHOLDER] * len(sizes)), 1)
    images = [np.zeros((h, w, 3), np.uint8) for w, h in sizes]
    encoded = processor.encode_prompts([prompt], [images])
    assert planner.prompt_length(prompt, sizes) == encoded["input_ids"].shape[1]


def _write(tmp_path, records, sizes):
    (tmp_path / "images").mkdir()
    for i, size in enumerate(sizes):
        Image.new("RGB", size).save(tmp_path / "images" / f"{i}.png")
    return records


def test_batches_group_by_settings_and_sort_by_length(planner, tmp_path):
    prompts = [tasks.planning_prompt("straight", (v, 0.0)) for v in (1.0, 12.5, 123.25, 3.0)]
    records = [tasks.conversation_record(f"p{i}", [f"images/{i}.png"], p, None, "planning")
               for i, p in enumerate(prompts)]
    records.insert(2, tasks.conversation_record("d", ["images/0.png"],
                                                tasks.detection_prompt(), None, "detection"))
    _write(tmp_path, records, [(320, 180)] * 4)
    jobs, errors = prepare(planner, records, tmp_path)
    assert errors == {} and sorted(jobs) == [0, 1, 2, 3, 4]
    lengths = {i: job.length for i, job in jobs.items()}
    assert lengths[3] > lengths[1] > lengths[0] == lengths[4]   # longer numbers, more tokens
    assert plan_batches(jobs, 2) == [(0, 4), (1, 3), (2,)]     # planning by length, then detection
    assert plan_batches(jobs, 8) == [(0, 4, 1, 3), (2,)]
    assert plan_batches(jobs, 1) == [(0,), (4,), (1,), (3,), (2,)]


def test_a_prompt_too_long_for_the_model_is_that_records_error(planner, tmp_path):
    record = {"id": "long", "image": ["images/0.png"], "conversations": [
        {"from": "human", "value": "<image> " + "left right " * 3000}]}
    _write(tmp_path, [record], [(320, 180)])
    jobs, errors = prepare(planner, [record], tmp_path)
    assert jobs == {} and "exceeds the model's 4096 positions" in errors[0]


def test_prediction_objects_have_the_reference_keys_even_for_malformed_records():
    item = prediction_item({"id": 7, "image": "a.png", "conversations": [
        {"from": "human", "value": "q <image>"}, {"from": "gpt", "value": "gt"}]}, 3, " x \n")
    assert list(item) == [*REFERENCE_KEYS, "wamdiff2"]
    assert (item["id"], item["datasource"], item["image"], item["question"],
            item["prediction"], item["ground_truth"]) == (7, "navsim", "a.png", "q <image>",
                                                           "x", "gt")
    bad = prediction_item(["not", "a", "record"], 4, "ignored", error="boom")
    assert bad == {"id": 4, "datasource": "navsim", "image": [], "question": "",
                   "prediction": "", "ground_truth": "", "error": "boom",
                   "wamdiff2": {"index": 4}}


def test_predictions_join_records_on_id_and_positions_tell_repeated_ids_apart(tmp_path):
    records = [{"id": "a"}, {"id": "b"}, {"id": 3}]
    ours = [prediction_item(r, i, f"ans{i}") for i, r in enumerate(records)]
    assert [m["prediction"] for m in match(records, ours, "f")] == ["ans0", "ans1", "ans2"]
    reference = [{"id": "b", "prediction": "B"}, {"id": 3, "prediction": "C"},
                 {"id": "a", "prediction": "A"}]                   # sorted by str(id)
    assert [m["prediction"] for m in match(records, reference, "f")] == ["A", "B", "C"]
    with pytest.raises(ValueError, match="no prediction for 1 of the 3 records.*'a'"):
        match(records, reference[:2], "f")
    with pytest.raises(ValueError, match="2 predictions for id 'a'"):
        match(records, reference + [{"id": "a", "prediction": "A2"}], "f")
    twice = [{"id": "a"}, {"id": "a"}]                             # ours: positions decide
    ours = [prediction_item(r, i, f"ans{i}") for i, r in enumerate(twice)][::-1]
    assert [m["prediction"] for m in match(twice, ours, "f")] == ["ans0", "ans1"]
    assert [m["prediction"] for m in match(twice[1:], ours, "f", [1])] == ["ans1"]
    with pytest.raises(ValueError, match="no prediction.*'3'"):
        match([{"id": "3"}], [{"id": 3, "prediction": "C"}], "f")


def test_a_reference_predictions_file_reads_back_as_records(tmp_path):
    path = tmp_path / "pred.json"
    path.write_text(json.dumps([
        {"id": "x", "datasource": "navsim", "image": ["i.png"], "question": "q <image>",
         "prediction": "p", "ground_truth": "1.00,0.00,2.00,0.00,3.00,0.00,4.00,0.00,5.00,"
                                           "0.00,6.00,0.00,7.00,0.00,8.00,0.00"},
        {"id": "y", "datasource": "navsim", "image": ["i.png"], "question": "q <image>",
         "prediction": "", "ground_truth": "", "error": "CUDA out of memory"}], indent=4))
    items = read_predictions(path)
    records = [item_record(item) for item in items]
    assert record_truth(records[0]) == ("planning", items[0]["ground_truth"])
    assert record_truth(records[1]) == (None, None)               # failed: no ground truth
    path.write_text(json.dumps([{"id": "x"}]))
    with pytest.raises(ValueError, match="entry 0 is not a prediction"):
        read_predictions(path)
