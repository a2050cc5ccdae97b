"""Detection task: Qwen3-VL JSON boxes on a 0-1000 grid, strictly parsed into pixels."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff2_core.tasks import (
    AnswerParseError,
    Detection,
    detection_prompt,
    format_detections,
    parse_detections,
    parse_model_detections,
)

FAST = settings(max_examples=200, deadline=None)
W, H = 1600, 900

sizes = st.one_of(st.integers(1, 4000),
                  st.floats(1.0, 4000.0, allow_nan=False, allow_infinity=False))
labels = st.one_of(st.sampled_from(["car", "truck", "pedestrian", "cyclist", "traffic cone"]),
                   st.text(min_size=1, max_size=12).filter(lambda s: s.strip()))
non_str = st.one_of(st.none(), st.binary(), st.integers(), st.floats(), st.booleans(),
                    st.lists(st.integers()), st.dictionaries(st.text(), st.integers()))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2000, 2000) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(["bbox_2d", "label", "car"]),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.sampled_from(["bbox_2d", "label", "score", "x"]) | st.text(max_size=5),
                      inner, max_size=3),
    max_leaves=20)


@st.composite
def image_and_detections(draw):
    width, height = draw(sizes), draw(sizes)
    dets = []
    for _ in range(draw(st.integers(0, 6))):
        xs = sorted(draw(st.floats(0, width)) for _ in range(2))
        ys = sorted(draw(st.floats(0, height)) for _ in range(2))
        dets.append(Detection(box=(xs[0], ys[0], xs[1], ys[1]), label=draw(labels),
                              score=draw(st.floats(0, 1))))
    return width, height, dets


@st.composite
def grid_answers(draw):
    items = []
    for _ in range(draw(st.integers(0, 5))):
        x1, x2 = sorted(draw(st.integers(0, 1000)) for _ in range(2))
        y1, y2 = sorted(draw(st.integers(0, 1000)) for _ in range(2))
        items.append({"bbox_2d": [x1, y1, x2, y2], "label": draw(labels)})
    return items


def fence(text: str) -> str:
    return "```json\n" + text + "\n```"


def check_valid(dets, width, height):
    assert isinstance(dets, list)
    for det in dets:
        assert isinstance(det, Detection)
        x1, y1, x2, y2 = det.box
        assert all(isinstance(v, float) for v in det.box)
        assert 0 <= x1 <= x2 <= width * (1 + 1e-12)
        assert 0 <= y1 <= y2 <= height * (1 + 1e-12)
        assert isinstance(det.label, str) and det.label.strip()
        assert det.score == 1.0


# --- Detection ------------------------------------------------------------------------------

def test_detection_is_a_frozen_dataclass_with_float_box():
    det = Detection(box=np.array([1, 2, 3, 4]), label="car")
    assert det.box == (1.0, 2.0, 3.0, 4.0) and all(type(v) is float for v in det.box)
    assert det.score == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        det.label = "truck"
    assert Detection((1, 2, 3, 4), "car") == det


@pytest.mark.parametrize("kwargs", [
    dict(box=(3, 2, 1, 4), label="car"), dict(box=(1, 4, 3, 2), label="car"),
    dict(box=(1, 2, 3), label="car"), dict(box=(1, 2, 3, 4, 5), label="car"),
    dict(box=(float("nan"), 2, 3, 4), label="car"), dict(box=(1, 2, float("inf"), 4), label="car"),
    dict(box="abcd", label="car"), dict(box=None, label="car"),
    dict(box=(1, 2, 3, 4), label=""), dict(box=(1, 2, 3, 4), label="  "),
    dict(box=(1, 2, 3, 4), label=None), dict(box=(1, 2, 3, 4), label=3),
    dict(box=(1, 2, 3, 4), label="car", score=float("nan")),
    dict(box=(1, 2, 3, 4), label="car", score="high"),
])
def test_detection_validates(kwargs):
    with pytest.raises(ValueError):
        Detection(**kwargs)


# --- prompt and format ----------------------------------------------------------------------

def test_prompt_has_one_placeholder_and_states_the_format():
    prompt = detection_prompt()
    assert prompt.count("<image>") == 1
    assert "bbox_2d" in prompt and "label" in prompt and "0-1000" in prompt and "[]" in prompt


def test_format_example():
    dets = [Detection((0, 0, 1600, 900), "car"), Detection((160.0, 90.0, 320.0, 450.0), "truck")]
    text = format_detections(dets, W, H)
    assert text == ('[{"bbox_2d": [0, 0, 1000, 1000], "label": "car"}, '
                    '{"bbox_2d": [100, 100, 200, 500], "label": "truck"}]')
    assert json.loads(text)[1]["bbox_2d"] == [100, 100, 200, 500]


def test_format_empty_is_empty_list():
    assert format_detections([], W, H) == "[]"
    assert parse_detections("[]", W, H) == []
    assert parse_detections(fence("[]"), W, H) == []
    assert parse_detections("  [ ]\n", W, H) == []


def test_format_keeps_non_ascii_labels():
    text = format_detections([Detection((0, 0, 1, 1), "Fußgänger")], W, H)
    assert "Fußgänger" in text
    assert parse_detections(text, W, H)[0].label == "Fußgänger"


@pytest.mark.parametrize("box", [(-1.0, 0, 10, 10), (0, -1.0, 10, 10), (0, 0, W + 1.0, 10),
                                 (0, 0, 10, H + 1.0), (W + 10.0, 0, W + 20.0, 10)])
def test_format_refuses_boxes_outside_the_image(box):
    with pytest.raises(ValueError):
        format_detections([Detection(box, "car")], W, H)


def test_format_rounds_within_half_a_grid_step_onto_the_border():
    # 0.7 px outside a 1600-px-wide image is less than half a grid step (0.8 px).
    text = format_detections([Detection((-0.7, 0, W + 0.7, H), "car")], W, H)
    assert json.loads(text)[0]["bbox_2d"] == [0, 0, 1000, 1000]


def test_format_refuses_swapped_width_and_height():
    with pytest.raises(ValueError):
        format_detections([Detection((0, 0, 1500, 800), "car")], H, W)


@pytest.mark.parametrize("size", [0, -1, float("nan"), float("inf"), None, "1600", True])
def test_bad_image_size_is_a_value_error(size):
    with pytest.raises(ValueError):
        format_detections([], size, H)
    with pytest.raises(ValueError):
        parse_detections("[]", W, size)


def test_bad_image_size_is_a_caller_bug_not_an_answer_error():
    with pytest.raises(ValueError) as info:
        parse_detections("[]", 0, H)
    assert not isinstance(info.value, AnswerParseError)


def test_format_refuses_non_detections():
    with pytest.raises(TypeError):
        format_detections([(0, 0, 1, 1)], W, H)


# --- parse ----------------------------------------------------------------------------------

def test_parse_converts_grid_to_pixels():
    text = '[{"bbox_2d": [100, 200, 500, 1000], "label": "car"}]'
    (det,) = parse_detections(text, W, H)
    assert det.box == pytest.approx((160.0, 180.0, 800.0, 900.0))
    assert det.label == "car" and det.score == 1.0


def test_parse_accepts_the_qwen_fenced_block_and_pretty_json():
    body = json.dumps([{"bbox_2d": [1, 2, 3, 4], "label": "car"}], indent="\t")
    want = parse_detections(body, W, H)
    assert parse_detections(fence(body), W, H) == want
    assert parse_detections("\n " + fence(body) + " \n", W, H) == want
    assert parse_detections("```json \r\n" + body + "\r\n```", W, H) == want


def test_degenerate_boxes_are_valid():
    (det,) = parse_detections('[{"bbox_2d": [5, 5, 5, 5], "label": "pole"}]', W, H)
    assert det.box[0] == det.box[2] and det.box[1] == det.box[3]


GOOD = '{"bbox_2d": [10, 20, 30, 40], "label": "car"}'


MALFORMED = [
    "", "  ", "null", "{}", GOOD, "[" + GOOD + "]]", "[[" + GOOD + "]]", "[" + GOOD + "][]",
    "[" + GOOD, "[" + GOOD + ",]", "[" + GOOD + "] trailing", "Detections: [" + GOOD + "]",
    "[" + GOOD + "].", "```\n[" + GOOD + "]\n```", "```JSON\n[" + GOOD + "]\n```",
    "```json [" + GOOD + "] ```", "```json\n[" + GOOD + "]\n```\nDone.",
    "Here:\n```json\n[" + GOOD + "]\n```", "```json\n[" + GOOD + "]\n", "```json\n[]\n``",
    "```json\n```json\n[]\n```\n```", "'[]'", '"[]"', "[1, 2]", '["car"]', "[null]",
    '[{"bbox_2d": [30, 20, 10, 40], "label": "car"}]',            # x2 < x1
    '[{"bbox_2d": [10, 40, 30, 20], "label": "car"}]',            # y2 < y1
    '[{"bbox_2d": [10, 20, 30, 1001], "label": "car"}]',
    '[{"bbox_2d": [-1, 20, 30, 40], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, 40.0], "label": "car"}]',          # float, even integral
    '[{"bbox_2d": [10, 20, 30, 40.5], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, 4e1], "label": "car"}]',
    '[{"bbox_2d": [true, 20, 30, 40], "label": "car"}]',
    '[{"bbox_2d": ["10", 20, 30, 40], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, NaN], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, Infinity], "label": "car"}]',
    '[{"bbox_2d": [10, 20, -Infinity, 40], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, 40, 50], "label": "car"}]',
    '[{"bbox_2d": [[10, 20], [30, 40]], "label": "car"}]',
    '[{"bbox_2d": {"x1": 10}, "label": "car"}]',
    '[{"bbox_2d": null, "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, 40]}]',                             # missing label
    '[{"label": "car"}]',                                          # missing bbox_2d
    '[{"bbox": [10, 20, 30, 40], "label": "car"}]',
    '[{"bbox_2d": [10, 20, 30, 40], "label": "car", "score": 0.9}]',   # extra key
    '[{"bbox_2d": [10, 20, 30, 40], "label": "car", "label": "bus"}]',  # duplicate key
    '[{"bbox_2d": [10, 20, 30, 40], "label": ""}]',
    '[{"bbox_2d": [10, 20, 30, 40], "label": "  "}]',
    '[{"bbox_2d": [10, 20, 30, 40], "label": 7}]',
    '[{"bbox_2d": [10, 20, 30, 40], "label": null}]',
    '[{"bbox_2d": [10, 20, 30, 40], "label": ["car"]}]',
    "[{'bbox_2d': [10, 20, 30, 40], 'label': 'car'}]",            # Python, not JSON
    '[{"bbox_2d": [10, 20, 30, 40], "label": "car"}, ]',
    '[{"bbox_2d": [10, 20, 30, ' + "9" * 5000 + '], "label": "car"}]',   # int too long
    "[" * 100_000 + "]" * 100_000,                                # deep nesting
]


@pytest.mark.parametrize("text", MALFORMED)
def test_parse_rejects_malformed(text):
    with pytest.raises(AnswerParseError) as info:
        parse_detections(text, W, H)
    err = info.value
    assert err.task == "detection" and err.raw_text == text and err.reason


INVERTED = ('[{"bbox_2d": [30, 20, 10, 40], "label": "car"}]',     # x2 < x1
            '[{"bbox_2d": [10, 40, 30, 20], "label": "car"}]')     # y2 < y1


def test_a_model_answer_loses_only_its_inverted_boxes():
    text = ('[{"bbox_2d": [10, 20, 30, 40], "label": "car"}, '
            '{"bbox_2d": [511, 456, 509, 589], "label": "car"}, '
            '{"bbox_2d": [100, 200, 300, 150], "label": "truck"}, '
            '{"bbox_2d": [5, 5, 5, 5], "label": "pole"}]')
    dets, dropped = parse_model_detections(text, W, H)
    assert dropped == 2
    assert [d.label for d in dets] == ["car", "pole"]
    assert dets[0] == parse_detections('[' + GOOD + ']', W, H)[0]
    for one in INVERTED:
        assert parse_model_detections(one, W, H) == ([], 1)


@pytest.mark.parametrize("text", [t for t in MALFORMED if t not in INVERTED])
def test_a_model_answer_is_otherwise_as_strict_as_parse_detections(text):
    with pytest.raises(AnswerParseError):
        parse_model_detections(text, W, H)


@pytest.mark.parametrize("value", [None, b"[]", bytearray(b"[]"), [], {}, 0, 1.5, object()])
def test_parse_rejects_non_str_with_answer_parse_error(value):
    with pytest.raises(AnswerParseError) as info:
        parse_detections(value, W, H)
    assert info.value.task == "detection" and isinstance(info.value.raw_text, str)


@FAST
@given(image_and_detections())
def test_round_trip_within_one_grid_step(case):
    width, height, dets = case
    text = format_detections(dets, width, height)
    back = parse_detections(text, width, height)
    assert len(back) == len(dets)
    check_valid(back, width, height)
    for got, want in zip(back, dets):
        assert got.label == want.label
        steps = (width, height, width, height)
        for g, w, size in zip(got.box, want.box, steps):
            assert abs(g - w) <= size / 1000                    # one grid step
            assert abs(g - w) <= size / 2000 * (1 + 1e-9) + 1e-9   # in fact half of one
    assert format_detections(back, width, height) == text     # canonical text is a fixed point
    assert parse_detections(fence(text), width, height) == back


@FAST
@given(grid_answers(), sizes, sizes)
def test_grid_answers_map_exactly(items, width, height):
    dets = parse_detections(json.dumps(items), width, height)
    assert [d.label for d in dets] == [it["label"] for it in items]
    for det, it in zip(dets, items):
        gx1, gy1, gx2, gy2 = it["bbox_2d"]
        assert det.box == (gx1 / 1000 * width, gy1 / 1000 * height,
                           gx2 / 1000 * width, gy2 / 1000 * height)
    check_valid(dets, width, height)


@FAST
@given(grid_answers(), st.booleans(), st.booleans())
def test_every_strict_prefix_is_rejected_unless_only_whitespace_is_cut(items, fenced, pretty):
    text = json.dumps(items, indent=2 if pretty else None)
    text = (fence(text) if fenced else text) + "\n"
    full = parse_detections(text, W, H)
    for k in range(len(text)):
        prefix = text[:k]
        try:
            got = parse_detections(prefix, W, H)
        except AnswerParseError:
            continue
        assert prefix.rstrip() == text.rstrip()
        assert got == full


@FAST
@given(st.one_of(
    st.text(),
    st.text(alphabet='[]{}",:0123456789 -.abelnoxt_d`\n'),
    json_values.map(json.dumps),
    st.lists(json_values).map(json.dumps),
    st.lists(st.fixed_dictionaries({"bbox_2d": json_values, "label": json_values}))
    .map(json.dumps),
    st.lists(st.fixed_dictionaries({"bbox_2d": st.lists(st.integers(-5, 1005), max_size=5),
                                    "label": st.text(max_size=4)})).map(json.dumps),
), sizes, sizes)
def test_garbage_parses_validly_or_raises_answer_parse_error(text, width, height):
    try:
        dets = parse_detections(text, width, height)
    except AnswerParseError as err:
        assert err.task == "detection" and err.raw_text == text
        return
    check_valid(dets, width, height)


@FAST
@given(grid_answers(), st.data())
def test_mutated_answers_parse_validly_or_raise_answer_parse_error(items, data):
    text = fence(json.dumps(items)) if data.draw(st.booleans()) else json.dumps(items)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        ch = data.draw(st.sampled_from(list('[]{}",:0123456789-. `\nx')))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        if op == "insert":
            text = text[:i] + ch + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1:]
        else:
            text = text[:i] + ch + text[i + 1:]
    try:
        dets = parse_detections(text, W, H)
    except AnswerParseError:
        return
    check_valid(dets, W, H)


@FAST
@given(non_str)
def test_non_str_inputs_raise_answer_parse_error(value):
    with pytest.raises(AnswerParseError):
        parse_detections(value, W, H)
