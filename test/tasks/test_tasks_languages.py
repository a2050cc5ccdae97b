"""Each task's answer language is exactly what its writer writes, and every word of it (with
the detection corner order the one check left out) is read back by the strict parser."""
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff2_core import tasks
from wamdiff2_core.tasks.languages import (DATA_LABELS, AnswerLanguage, detection_language,
                                           planning_language, qa_language)

PLANNING = planning_language()
DETECTION = detection_language()

metres = st.floats(-1000.0, 1000.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(metres, min_size=16, max_size=16))
def test_every_written_plan_is_a_word(values):
    text = tasks.format_waypoints(np.array(values).reshape(8, 2))
    assert PLANNING.matches(text)


@pytest.mark.parametrize("text,ok", [
    ("0.00", True), ("-0.01", True), ("1000.00", True), ("-1000.00", True),
    ("-0.00", False), ("1000.01", False), ("01.00", False), ("1.0", False), ("+1.00", False),
    ("999.99", True), ("1e3", False), (" 1.00", False)])
def test_planning_numbers(text, ok):
    assert PLANNING.matches(",".join([text] + ["0.00"] * 15)) is ok



def test_words_of_the_planning_language_parse():
    rng = random.Random(0)
    numbers = ["0.00", "-0.01", "7.50", "-12.34", "999.99", "1000.00", "-1000.00",
               "100.10", "0.90"]
    for _ in range(200):
        text = ",".join(rng.choice(numbers) for _ in range(16))
        assert PLANNING.matches(text)
        assert tasks.format_waypoints(tasks.parse_waypoints(text)) == text
    assert not PLANNING.matches(",".join(["1.00"] * 15))
    assert not PLANNING.matches(",".join(["1.00"] * 17))
    assert not PLANNING.matches(",".join(["1.00"] * 16) + ",")


boxes = st.lists(st.tuples(st.floats(0, 640), st.floats(0, 360), st.floats(0, 640),
                           st.floats(0, 360)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(boxes)
def test_every_written_detection_list_is_a_word(raw):
    dets = [tasks.Detection((min(a, c), min(b, d), max(a, c), max(b, d)), "car")
            for a, b, c, d in raw]
    text = tasks.format_detections(dets, 640, 360)
    assert DETECTION.matches(text)
    assert detection_language(max_boxes=len(dets)).matches(text)
    if dets:
        assert not detection_language(max_boxes=len(dets) - 1).matches(text)


def test_detection_words_parse_when_their_corners_are_ordered():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(0, 4)
        items = []
        for _ in range(n):
            v = [rng.choice([0, 1000, rng.randint(0, 1000)]) for _ in range(4)]
            items.append('{"bbox_2d": [%d, %d, %d, %d], "label": "car"}' % tuple(v))
        text = "[" + ", ".join(items) + "]"
        assert DETECTION.matches(text)
        try:
            dets = tasks.parse_detections(text, 1000, 1000)
        except tasks.AnswerParseError as exc:
            assert "x1 <= x2 and y1 <= y2" in str(exc)
        else:
            assert tasks.format_detections(dets, 1000, 1000) == text
    for bad in ('[{"bbox_2d": [1, 2, 3, 1001], "label": "car"}]',
                '[{"bbox_2d": [01, 2, 3, 4], "label": "car"}]',
                '[{"bbox_2d": [1, 2, 3, 4], "label": "bus"}]',
                '[{"bbox_2d":[1, 2, 3, 4], "label": "car"}]', "[ ]", ""):
        assert not DETECTION.matches(bad)
    assert detection_language(["car", "truck"]).matches(
        '[{"bbox_2d": [1, 2, 3, 4], "label": "truck"}]')
    assert detection_language(max_boxes=0).matches("[]")


def test_qa_languages():
    from wamdiff2_core.sim.qa import TEMPLATES, LaneFacts

    facts = LaneFacts((12.0,), True, False, (), (), 0, 2)
    for template in TEMPLATES.values():
        item = template(facts)
        lang = qa_language(item.answer_set)
        assert all(lang.matches(a) for a in item.answer_set)
        assert lang.matches(item.answer) and not lang.matches(item.answer + ".")
    free = qa_language()
    assert free.matches("a car ahead") and free.matches(" x\n") and not free.matches(" \n")


def test_the_data_label_and_errors():
    from wamdiff2_core.sim.detection import LABEL

    assert LABEL in DATA_LABELS
    with pytest.raises(ValueError, match="labels"):
        detection_language([])
    with pytest.raises(ValueError, match="max_boxes"):
        detection_language(max_boxes=-1)
    with pytest.raises(ValueError, match="choices"):
        qa_language([" yes"])
    with pytest.raises(ValueError, match="bad regular expression"):
        AnswerLanguage("x", "(")
