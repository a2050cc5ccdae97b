"""Conversation records in the reference repository's JSON format, written and read back."""
from __future__ import annotations

import copy
import json
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff2_core.tasks import (
    conversation_record,
    detection_prompt,
    format_waypoints,
    parse_waypoints,
    planning_prompt,
    record_prompt_and_answer,
)

FAST = settings(max_examples=200, deadline=None)

# The sample record of the reference repository's README, verbatim (note: no "task" key,
# an extra "datasource" key).
REFERENCE_RECORD_JSON = r"""
{
  "datasource": "Navsim",
  "id": "43ebecce459052f2",
  "image": [
    "data/opensource/navsim_dataset/sensor_blobs/test/2021.05.25.14.16.10_veh-35_01690_02183/CAM_F0/d28200c994c15229.jpg"
  ],
  "conversations": [
    {
      "from": "human",
      "value": "Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: right\nThe current position is (0.00,0.00)\nThe current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)\nInstruction: Based on the visual motion cues from the image (such as the relative speed of other vehicles and the changing distance to the intersection) and the provided telemetry, predict the optimal driving action for the next 4 seconds with 8 new waypoints."
    },
    {
      "from": "gpt",
      "value": "2.26,-0.17,4.43,-0.70,6.52,-1.55,8.48,-2.64,10.28,-3.88,11.99,-5.25,13.76,-6.83,15.59,-8.59"
    }
  ]
}
"""
REFERENCE_RECORD = json.loads(REFERENCE_RECORD_JSON)
PROMPT = planning_prompt("right", velocity=(4.66, -0.09), acceleration=(0.17, -1.53))
ANSWER = REFERENCE_RECORD["conversations"][1]["value"]
IMAGE = REFERENCE_RECORD["image"][0]


def test_record_layout():
    record = conversation_record("43ebecce459052f2", [IMAGE], PROMPT, ANSWER, "planning")
    assert record == {
        "id": "43ebecce459052f2", "task": "planning", "image": [IMAGE],
        "conversations": [{"from": "human", "value": PROMPT}, {"from": "gpt", "value": ANSWER}],
    }
    assert record["conversations"] == REFERENCE_RECORD["conversations"]
    assert json.loads(json.dumps(record)) == record


def test_reads_the_reference_record():
    prompt, answer = record_prompt_and_answer(REFERENCE_RECORD)
    assert prompt == PROMPT and answer == ANSWER
    assert parse_waypoints(answer).shape == (8, 2)


def test_reads_back_what_it_writes_through_json():
    record = conversation_record(7, [pathlib.Path("a/b.jpg")], PROMPT, ANSWER, "planning")
    assert record["image"] == ["a/b.jpg"] and record["id"] == 7
    assert record_prompt_and_answer(json.loads(json.dumps(record))) == (PROMPT, ANSWER)


def test_record_without_answer():
    record = conversation_record("x", [IMAGE], detection_prompt(), None, "detection")
    assert record["conversations"] == [{"from": "human", "value": detection_prompt()}]
    assert record_prompt_and_answer(record) == (detection_prompt(), None)


def test_reads_system_turn_and_single_str_image():
    record = copy.deepcopy(REFERENCE_RECORD)
    record["image"] = IMAGE
    record["conversations"].insert(0, {"from": "system", "value": "You are a driver."})
    assert record_prompt_and_answer(record) == (PROMPT, ANSWER)


def test_text_only_record():
    record = conversation_record("t", [], "Describe a roundabout.", "A circular junction.", "qa")
    assert record["image"] == []
    del record["image"]
    assert record_prompt_and_answer(record) == ("Describe a roundabout.", "A circular junction.")


@pytest.mark.parametrize("kwargs, error", [
    (dict(image_paths=IMAGE), TypeError),                  # a str is not a list of paths
    (dict(image_paths=[IMAGE, IMAGE]), ValueError),        # two images, one placeholder
    (dict(image_paths=[]), ValueError),
    (dict(image_paths=[3]), TypeError),
    (dict(image_paths=[""]), ValueError),
    (dict(prompt=""), ValueError),
    (dict(prompt=None), TypeError),
    (dict(answer=3), TypeError),
    (dict(task=""), ValueError),
    (dict(task=None), TypeError),
    (dict(id=True), TypeError),
    (dict(id=None), TypeError),
    (dict(id=1.5), TypeError),
])
def test_record_refuses_bad_arguments(kwargs, error):
    args = dict(id="x", image_paths=[IMAGE], prompt=PROMPT, answer=ANSWER, task="planning")
    args.update(kwargs)
    with pytest.raises(error):
        conversation_record(**args)


def _mutated(change):
    record = copy.deepcopy(REFERENCE_RECORD)
    change(record)
    return record


@pytest.mark.parametrize("record, match", [
    (None, "dict"),
    ([REFERENCE_RECORD], "dict"),
    ("{}", "dict"),
    ({}, "conversations"),
    (_mutated(lambda r: r.update(conversations=[])), "conversations"),
    (_mutated(lambda r: r.update(conversations="hi")), "conversations"),
    (_mutated(lambda r: r["conversations"].__setitem__(0, "hi")), r"conversations\[0\]"),
    (_mutated(lambda r: r["conversations"][0].pop("value")), r"conversations\[0\]"),
    (_mutated(lambda r: r["conversations"][1].update(value=None)), r"conversations\[1\]"),
    (_mutated(lambda r: r["conversations"][0].update({"from": 1})), r"conversations\[0\]"),
    (_mutated(lambda r: r["conversations"].reverse()), "roles"),
    (_mutated(lambda r: r["conversations"][1].update({"from": "human"})), "roles"),
    (_mutated(lambda r: r["conversations"][0].update({"from": "user"})), "roles"),
    (_mutated(lambda r: r["conversations"].extend(copy.deepcopy(r["conversations"]))), "roles"),
    (_mutated(lambda r: r["conversations"].pop(0)), "roles"),
    (_mutated(lambda r: r["conversations"][0].update(value="  ")), "blank"),
    (_mutated(lambda r: r.update(image=[])), "placeholder"),
    (_mutated(lambda r: r.update(image=[IMAGE, IMAGE])), "placeholder"),
    (_mutated(lambda r: r.pop("image")), "placeholder"),
    (_mutated(lambda r: r.update(image=[3])), "image"),
    (_mutated(lambda r: r.update(image={"a": 1})), "image"),
    (_mutated(lambda r: r.update(id=True)), "id"),
    (_mutated(lambda r: r.update(id=[1])), "id"),
    (_mutated(lambda r: r.update(task=3)), "task"),
])
def test_malformed_records_raise_a_clear_value_error(record, match):
    with pytest.raises(ValueError, match=match):
        record_prompt_and_answer(record)


@FAST
@given(st.integers(0, 3), st.text(max_size=30), st.one_of(st.none(), st.text(max_size=30)),
       st.one_of(st.text(min_size=1, max_size=10), st.integers()))
def test_round_trip_with_any_number_of_images(n, filler, answer, rid):
    filler = filler.replace("<image>", "")
    prompt = "Frames: " + "".join(f"<image>{filler}" for _ in range(n)) + "go"
    paths = [f"cam/{i}.jpg" for i in range(n)]
    record = conversation_record(rid, paths, prompt, answer, "qa")
    assert record_prompt_and_answer(json.loads(json.dumps(record))) == (prompt, answer)


@FAST
@given(st.floats(-50, 50, allow_nan=False), st.floats(-50, 50, allow_nan=False))
def test_planning_record_round_trip(vx, vy):
    wp = np.cumsum(np.full((8, 2), [vx, vy]) * 0.5, axis=0)
    prompt = planning_prompt("straight", velocity=(vx, vy))
    record = conversation_record("s", ["f.jpg"], prompt, format_waypoints(wp), "planning")
    got_prompt, got_answer = record_prompt_and_answer(record)
    assert got_prompt == prompt
    assert np.allclose(parse_waypoints(got_answer), wp, atol=0.005 + 1e-9)
