"""The tasks package exports the contract of docs/INTERFACES.md, and AnswerParseError's shape."""
from __future__ import annotations

import pickle

import pytest

import wamdiff2_core.tasks as tasks
from wamdiff2_core.tasks import COMMANDS, NUM_WAYPOINTS, WAYPOINT_DT_S, AnswerParseError

CONTRACT = [
    "AnswerParseError", "COMMANDS", "NUM_WAYPOINTS", "WAYPOINT_DT_S",
    "planning_prompt", "format_waypoints", "parse_waypoints",
    "Detection", "detection_prompt", "format_detections", "parse_detections",
    "qa_prompt", "format_answer", "parse_answer",
    "conversation_record", "record_prompt_and_answer",
    "parse_planning_prompt",   # from the issue: reading generated prompts back
]


@pytest.mark.parametrize("name", CONTRACT)
def test_contract_names_are_exported(name):
    assert hasattr(tasks, name)
    assert name in tasks.__all__


def test_constants():
    assert COMMANDS == ("left", "right", "straight")
    assert NUM_WAYPOINTS == 8
    assert WAYPOINT_DT_S == 0.5
    assert NUM_WAYPOINTS * WAYPOINT_DT_S == 4.0   # "the next 4 seconds with 8 new waypoints"


def test_answer_parse_error_attributes():
    err = AnswerParseError("planning", "1,2", "expected 16 numbers")
    assert isinstance(err, ValueError)
    assert (err.task, err.raw_text, err.reason) == ("planning", "1,2", "expected 16 numbers")
    assert "planning" in str(err) and "expected 16 numbers" in str(err) and "1,2" in str(err)


def test_answer_parse_error_non_str_raw_text_is_its_repr():
    assert AnswerParseError("qa", None, "r").raw_text == "None"
    assert AnswerParseError("qa", b"ab", "r").raw_text == "b'ab'"

    class BadRepr:
        def __repr__(self):
            raise RuntimeError("boom")

    assert "BadRepr" in AnswerParseError("qa", BadRepr(), "r").raw_text


def test_answer_parse_error_long_text_kept_whole_but_message_short():
    text = "x" * 10_000
    err = AnswerParseError("qa", text, "r")
    assert err.raw_text == text
    assert len(str(err)) < 400


def test_answer_parse_error_pickles():
    err = AnswerParseError("detection", "[", "truncated")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is AnswerParseError
    assert (back.task, back.raw_text, back.reason) == ("detection", "[", "truncated")
    assert str(back) == str(err)


def test_ego_motion_bounds_are_one_definition_for_cli_and_node():
    """Issue 45: the node's odometry limits default to the core's bounds and word their
    refusal with the core's check."""
    import math

    import pytest

    from wamdiff2_core import tasks

    assert tasks.check_speed((69.9, 0.0)) == pytest.approx(69.9)
    for bad in ((70.1, 0.0), (50.0, -50.0), (math.inf, 0.0), (math.nan, 0.0)):
        with pytest.raises(tasks.ImplausibleMotion, match="exceeds max_speed_mps 70 m/s"):
            tasks.check_speed(bad)
    with pytest.raises(tasks.ImplausibleMotion, match="25 m/s\\^2 exceeds max_accel_mps2 20"):
        tasks.check_accel((0.0, -25.0))
    assert tasks.check_accel((1e6, 0.0), max_accel_mps2=math.inf) == 1e6
