"""Each task's answer language is exactly what its writer writes, and every word of it (with
the detection corner order the one check left out) is read back by the strict parser."""
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff2_core import tasks
from wamdiff2_core.tasks.languages import (DATA_LABELS, AnswerLanguage, detection_language,
                                           int_range_regex, planning_language, qa_language)

PLANNING = planning_language(max_speed=None)        # the parser's whole range
ENVELOPE = planning_language()                      # the default: within 40 m/s of the ego
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


def test_the_envelope_bounds_each_coordinate_by_the_speed_and_the_whole_second():
    # waypoints at 0.5 .. 4.0 s; at 40 m/s the bounds are 40, 40, 80, 80, 120, 120, 160, 160 m
    bounds = [40, 40, 80, 80, 120, 120, 160, 160]
    for k, bound in enumerate(bounds):
        for coord in (0, 1):
            for value, ok in [(bound + 0.99, True), (-(bound + 0.99), True), (bound + 1, False),
                              (-(bound + 1), False), (0.0, True), (-0.01, True)]:
                wp = np.zeros((8, 2))
                wp[k, coord] = value
                assert ENVELOPE.matches(tasks.format_waypoints(wp)) is ok, (k, coord, value)
    # the decoded plans that motivated it: 90.99 m ahead after 2 s, 1000 m aside after 3 s
    assert not ENVELOPE.matches("2.43,0.00,5.73,0.00,7.88,0.00,90.99,0.00,12.00,0.00,14.00,"
                                "0.00,17.00,0.00,20.00,0.00")
    assert not ENVELOPE.matches("2.40,0.00,4.79,0.00,7.12,0.00,9.73,0.00,11.92,0.00,15.12,"
                                "1000.00,3.00,0.00,3.00,10.03")
    assert planning_language(max_speed=10.0).matches(",".join(["10.99"] * 16))
    assert not planning_language(max_speed=10.0).matches(",".join(["11.00"] * 16))
    with pytest.raises(ValueError, match="max_speed"):
        planning_language(max_speed=0.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=16, max_size=16),
       st.floats(1.0, 60.0))
def test_every_written_plan_inside_the_envelope_is_a_word_and_none_outside(unit, speed):
    seconds = np.ceil(np.arange(1, 9) * 0.5).repeat(2)
    bound = np.floor(speed * seconds + 1e-9) + 0.99
    values = np.array(unit) * bound * 1.1
    text = tasks.format_waypoints(values.reshape(8, 2))
    inside = bool((np.abs(tasks.parse_waypoints(text).reshape(-1)) <= bound + 1e-9).all())
    assert planning_language(max_speed=speed).matches(text) is inside


def test_every_plan_of_the_generated_data_is_inside_the_envelope(tmp_path):
    """The envelope holds the simulator's plans (its fastest waypoint in the bundle's data:
    26.7 m/s from the ego), on all three scenario families."""
    pytest.importorskip("highway_env")
    import json
    from wamdiff2_core.sim.generator import GeneratorConfig, generate
    generate(tmp_path, GeneratorConfig(episodes=3, seed=77, tasks=("planning",)),
             progress=False)
    records = json.loads((tmp_path / "train.json").read_text())
    assert len(records) == 60
    for r in records:
        assert ENVELOPE.matches(tasks.record_prompt_and_answer(r)[1])


def test_int_range_regex_is_exactly_the_range():
    import re
    for low in (0, 1):
        for high in range(low, 1001):
            rx = re.compile(int_range_regex(high, low))
            got = [n for n in range(0, 1200) if rx.fullmatch(str(n))]
            assert got == list(range(low, high + 1)), (low, high)
    with pytest.raises(ValueError):
        int_range_regex(0, 1)


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
