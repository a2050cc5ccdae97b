"""Planning task: the reference prompt byte for byte, and the strict waypoint parser."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from wamdiff2_core.tasks import (
    COMMANDS,
    AnswerParseError,
    format_waypoints,
    parse_planning_prompt,
    parse_waypoints,
    planning_prompt,
)

FAST = settings(max_examples=200, deadline=None)

# The user turn of the sample in the reference repository's README (WAM-Diff2, "Training
# data sample"), copied verbatim.
REFERENCE_PROMPT = (
    "Here is a front-view images from a driving vehicle: <image>\n"
    "The navigation information is: right\n"
    "The current position is (0.00,0.00)\n"
    "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)\n"
    "Instruction: Based on the visual motion cues from the image (such as the relative speed of "
    "other vehicles and the changing distance to the intersection) and the provided telemetry, "
    "predict the optimal driving action for the next 4 seconds with 8 new waypoints."
)
REFERENCE_ANSWER = ("2.26,-0.17,4.43,-0.70,6.52,-1.55,8.48,-2.64,10.28,-3.88,11.99,-5.25,"
                    "13.76,-6.83,15.59,-8.59")
REFERENCE_WAYPOINTS = np.array([[2.26, -0.17], [4.43, -0.70], [6.52, -1.55], [8.48, -2.64],
                                [10.28, -3.88], [11.99, -5.25], [13.76, -6.83], [15.59, -8.59]])

coord = st.floats(-1000, 1000, allow_nan=False, allow_infinity=False)
waypoints = arrays(np.float64, (8, 2), elements=coord)
telemetry = st.floats(-200, 200, allow_nan=False, allow_infinity=False)
pairs = st.tuples(telemetry, telemetry)
non_str = st.one_of(st.none(), st.binary(), st.integers(), st.floats(), st.booleans(),
                    st.lists(st.floats()), st.dictionaries(st.text(), st.integers()))


def canonical_tokens(values) -> list[str]:
    return format_waypoints(np.asarray(values).reshape(8, 2)).split(",")


# --- prompt --------------------------------------------------------------------------------

def test_prompt_reproduces_the_reference_byte_for_byte():
    prompt = planning_prompt("right", velocity=(4.66, -0.09), acceleration=(0.17, -1.53),
                             position=(0.0, 0.0))
    assert prompt == REFERENCE_PROMPT
    assert prompt.encode("utf-8") == REFERENCE_PROMPT.encode("utf-8")


def test_prompt_defaults_and_single_placeholder():
    prompt = planning_prompt("straight")
    assert prompt.count("<image>") == 1
    assert "The current position is (0.00,0.00)\n" in prompt
    assert "The current velocity is: (0.00,0.00) and current accelerate is: (0.00,0.00)\n" \
        in prompt


def test_prompt_never_writes_negative_zero():
    prompt = planning_prompt("left", velocity=(-0.0, -0.004), acceleration=(-0.0049, 0.0),
                             position=(-1e-9, -0.0))
    assert "-0.00" not in prompt
    assert "(0.00,0.00)" in prompt
    assert "-0.01" in planning_prompt("left", velocity=(-0.006, 0.0))


def test_prompt_accepts_numpy_vectors():
    prompt = planning_prompt("right", velocity=np.array([4.66, -0.09]),
                             acceleration=np.array([0.17, -1.53], dtype=np.float32))
    assert prompt == REFERENCE_PROMPT


@pytest.mark.parametrize("command", ["Left", "RIGHT", "unknown", "", " left", None, 1])
def test_prompt_rejects_unknown_commands(command):
    with pytest.raises(ValueError):
        planning_prompt(command)


@pytest.mark.parametrize("vector", [(1.0,), (1.0, 2.0, 3.0), (float("nan"), 0.0),
                                    (0.0, float("inf")), "ab", None, [[1.0, 2.0]], ("a", 1),
                                    ("1.5", 2.0), (True, 0.0), {"x": 1, "y": 2}, 3.0])
def test_prompt_rejects_bad_vectors(vector):
    with pytest.raises(ValueError):
        planning_prompt("left", velocity=vector)
    with pytest.raises(ValueError):
        planning_prompt("left", acceleration=vector)
    with pytest.raises(ValueError):
        planning_prompt("left", position=vector)


def test_parse_prompt_reads_the_reference():
    assert parse_planning_prompt(REFERENCE_PROMPT) == {
        "command": "right", "position": (0.0, 0.0), "velocity": (4.66, -0.09),
        "acceleration": (0.17, -1.53), "cameras": ("front",)}


def test_parse_prompt_reads_negative_zero_as_zero():
    fields = parse_planning_prompt(REFERENCE_PROMPT.replace("(0.00,0.00)", "(-0.00,0.00)"))
    assert fields["position"] == (0.0, 0.0)
    assert math.copysign(1.0, fields["position"][0]) == 1.0


@FAST
@given(st.sampled_from(COMMANDS), pairs, pairs, pairs)
def test_prompt_round_trip(command, velocity, acceleration, position):
    prompt = planning_prompt(command, velocity=velocity, acceleration=acceleration,
                             position=position)
    assert prompt.count("<image>") == 1
    assert "-0.00" not in prompt
    fields = parse_planning_prompt(prompt)
    assert fields["command"] == command
    for key, want in (("velocity", velocity), ("acceleration", acceleration),
                      ("position", position)):
        assert np.allclose(fields[key], want, rtol=0, atol=0.005 + 1e-9)
    assert planning_prompt(**fields) == prompt


@pytest.mark.parametrize("text", [
    REFERENCE_PROMPT + " ",
    " " + REFERENCE_PROMPT,
    REFERENCE_PROMPT + "\n",
    REFERENCE_PROMPT.replace("right", "Right"),
    REFERENCE_PROMPT.replace("right", "unknown"),
    REFERENCE_PROMPT.replace("4.66", "4.7"),
    REFERENCE_PROMPT.replace("4.66", "4.660"),
    REFERENCE_PROMPT.replace("4.66", "04.66"),
    REFERENCE_PROMPT.replace("4.66", "+4.66"),
    REFERENCE_PROMPT.replace("4.66", "nan"),
    REFERENCE_PROMPT.replace("(4.66,-0.09)", "(4.66, -0.09)"),
    REFERENCE_PROMPT.replace("<image>", ""),
    REFERENCE_PROMPT.replace("images", "image"),
    REFERENCE_PROMPT.replace("\n", "\r\n"),
    REFERENCE_PROMPT.replace("4.66", "\u0664.66"),   # an Arabic-Indic digit
    "",
])
def test_parse_prompt_rejects_near_misses(text):
    with pytest.raises(AnswerParseError) as info:
        parse_planning_prompt(text)
    assert info.value.task == "planning_prompt"
    assert info.value.raw_text == text


def test_parse_prompt_rejects_every_strict_prefix():
    for k in range(len(REFERENCE_PROMPT)):
        with pytest.raises(AnswerParseError):
            parse_planning_prompt(REFERENCE_PROMPT[:k])


@FAST
@given(non_str)
def test_parse_prompt_rejects_non_str(value):
    with pytest.raises(AnswerParseError):
        parse_planning_prompt(value)


@FAST
@given(st.one_of(st.text(), st.text(alphabet="0123456789.,-() \nabcdefghilmnorstuvw:<>")))
def test_parse_prompt_garbage_parses_validly_or_raises_answer_parse_error(text):
    try:
        fields = parse_planning_prompt(text)
    except AnswerParseError as err:
        assert err.raw_text == text
        return
    assert planning_prompt(**fields) == text   # only a canonical prompt can parse


# --- waypoint answer ------------------------------------------------------------------------

def test_reference_answer_round_trip():
    wp = parse_waypoints(REFERENCE_ANSWER)
    assert wp.shape == (8, 2) and wp.dtype == np.float64
    np.testing.assert_array_equal(wp, REFERENCE_WAYPOINTS)
    assert format_waypoints(wp) == REFERENCE_ANSWER


def test_format_two_decimals_without_spaces():
    wp = np.arange(16, dtype=np.float64).reshape(8, 2) * 1.005
    text = format_waypoints(wp)
    assert " " not in text
    assert all(len(tok.split(".")[1]) == 2 for tok in text.split(","))


def test_format_never_writes_negative_zero():
    wp = np.zeros((8, 2))
    wp[0] = (-0.0, -0.004)
    wp[1] = (-0.0049999, -1e-300)
    text = format_waypoints(wp)
    assert "-0.00" not in text.split(",")
    assert text == ",".join(["0.00"] * 16)


def test_format_accepts_nested_lists():
    assert format_waypoints(REFERENCE_WAYPOINTS.tolist()) == REFERENCE_ANSWER


@pytest.mark.parametrize("wp", [
    np.zeros(16), np.zeros((8, 3)), np.zeros((7, 2)), np.zeros((1, 8, 2)),
    np.full((8, 2), np.nan), np.full((8, 2), np.inf), np.full((8, 2), 1000.01),
    np.full((8, 2), -1000.5), [["a", "b"]] * 8, None,
])
def test_format_rejects_bad_arrays(wp):
    with pytest.raises(ValueError):
        format_waypoints(wp)


def test_parse_limits_are_inclusive():
    assert parse_waypoints(",".join(["1000.00"] * 16))[0, 0] == 1000.0
    assert parse_waypoints(",".join(["-1000.00"] * 16))[7, 1] == -1000.0
    assert format_waypoints(np.full((8, 2), 1000.0)) == ",".join(["1000.00"] * 16)


def test_parse_reads_negative_zero_as_positive_zero():
    wp = parse_waypoints(",".join(["-0.00"] * 16))
    assert np.all(np.copysign(1.0, wp) == 1.0)


def test_parse_tolerates_spaces_after_commas_and_surrounding_whitespace():
    spaced = " \n\t" + REFERENCE_ANSWER.replace(",", ",  ") + "\n "
    np.testing.assert_array_equal(parse_waypoints(spaced), REFERENCE_WAYPOINTS)


def _replace_item(i: int, new: str) -> str:
    toks = REFERENCE_ANSWER.split(",")
    toks[i] = new
    return ",".join(toks)


@pytest.mark.parametrize("text", [
    "",
    "   \n",
    REFERENCE_ANSWER + ",",
    "," + REFERENCE_ANSWER,
    REFERENCE_ANSWER + ",1.00",                      # 17 numbers
    REFERENCE_ANSWER.rsplit(",", 1)[0],              # 15 numbers
    REFERENCE_ANSWER.replace(",", ";"),
    REFERENCE_ANSWER.replace(",", " "),
    REFERENCE_ANSWER.replace(",", " ,"),             # space before a comma
    REFERENCE_ANSWER.replace(",", ",\n"),            # newline after a comma
    REFERENCE_ANSWER.replace(",", ",\t"),            # tab after a comma
    REFERENCE_ANSWER.replace(",", ",,", 1),
    "[" + REFERENCE_ANSWER + "]",
    "(" + REFERENCE_ANSWER + ")",
    "Waypoints: " + REFERENCE_ANSWER,
    REFERENCE_ANSWER + " m",
    REFERENCE_ANSWER + ".",
    "```\n" + REFERENCE_ANSWER + "\n```",
    _replace_item(0, "nan"), _replace_item(0, "NaN"), _replace_item(3, "inf"),
    _replace_item(3, "-inf"), _replace_item(5, "Infinity"),
    _replace_item(0, "2.3"),                         # one decimal
    _replace_item(0, "2.260"),                       # three decimals
    _replace_item(0, "2"),                           # no decimals
    _replace_item(0, "2."), _replace_item(0, ".26"),
    _replace_item(0, "+2.26"), _replace_item(0, "--2.26"), _replace_item(0, "- 2.26"),
    _replace_item(0, "02.26"), _replace_item(0, "2.26e0"), _replace_item(0, "2_0.26"),
    _replace_item(0, "\u0662.26"),                   # an Arabic-Indic two
    _replace_item(0, "\uff12.26"),                   # a fullwidth two
    _replace_item(0, "1000.01"), _replace_item(0, "-1000.01"), _replace_item(0, "99999.00"),
    _replace_item(0, "0x1.00"), _replace_item(0, ""), _replace_item(15, "-8.59-"),
    REFERENCE_ANSWER.replace(",", "\u00a0,", 1),
])
def test_parse_rejects_malformed(text):
    with pytest.raises(AnswerParseError) as info:
        parse_waypoints(text)
    err = info.value
    assert err.task == "planning"
    assert err.raw_text == text
    assert isinstance(err.reason, str) and err.reason


@pytest.mark.parametrize("value", [None, b"1.00", REFERENCE_ANSWER.encode(), bytearray(b"1"),
                                   1.0, 16, ["1.00"] * 16, np.zeros((8, 2)), object()])
def test_parse_rejects_non_str_with_answer_parse_error(value):
    with pytest.raises(AnswerParseError) as info:
        parse_waypoints(value)
    assert info.value.task == "planning"
    assert isinstance(info.value.raw_text, str)


def test_parse_accepts_str_subclass():
    class Text(str):
        pass

    np.testing.assert_array_equal(parse_waypoints(Text(REFERENCE_ANSWER)), REFERENCE_WAYPOINTS)


@FAST
@given(waypoints)
def test_round_trip_within_a_hundredth(wp):
    text = format_waypoints(wp)
    back = parse_waypoints(text)
    assert back.shape == (8, 2) and back.dtype == np.float64
    assert np.all(np.abs(back - wp) <= 0.005 + 1e-9)     # nearest 0.01
    assert "-0.00" not in text.split(",")
    assert format_waypoints(back) == text                   # canonical text is a fixed point


@FAST
@given(waypoints, st.lists(st.integers(0, 3), min_size=15, max_size=15),
       st.text(alphabet=" \t\n\r", max_size=3), st.text(alphabet=" \t\n\r", max_size=3))
def test_spaced_answers_parse_to_the_same_values(wp, spaces, lead, trail):
    toks = canonical_tokens(wp)
    text = lead + toks[0] + "".join("," + " " * n + t for n, t in zip(spaces, toks[1:])) + trail
    np.testing.assert_array_equal(parse_waypoints(text),
                                  parse_waypoints(",".join(toks)))


@FAST
@given(waypoints)
def test_every_strict_prefix_of_a_canonical_answer_is_rejected(wp):
    # Guaranteed for every cut, including one inside the final number: "...,15.5" and
    # "...,15." and "...,15" of "...,15.59" all fail, since every number needs two decimals.
    text = format_waypoints(wp)
    for k in range(len(text)):
        with pytest.raises(AnswerParseError):
            parse_waypoints(text[:k])


@FAST
@given(waypoints, st.lists(st.integers(0, 2), min_size=15, max_size=15),
       st.text(alphabet=" \n", max_size=3))
def test_prefixes_of_any_accepted_answer_fail_unless_only_whitespace_is_cut(wp, spaces, trail):
    toks = canonical_tokens(wp)
    text = toks[0] + "".join("," + " " * n + t for n, t in zip(spaces, toks[1:])) + trail
    full = parse_waypoints(text)
    for k in range(len(text)):
        prefix = text[:k]
        try:
            got = parse_waypoints(prefix)
        except AnswerParseError:
            continue
        assert prefix.rstrip() == text.rstrip()
        np.testing.assert_array_equal(got, full)


def test_final_number_truncation_is_rejected():
    # The case a count check alone would miss: "1.2" of "1.25" keeps all 16 numbers.
    text = ",".join(["1.25"] * 16)
    for cut in ("1.2", "1.", "1"):
        with pytest.raises(AnswerParseError):
            parse_waypoints(text[: -len("1.25")] + cut)


def _check_valid(wp):
    assert isinstance(wp, np.ndarray) and wp.shape == (8, 2) and wp.dtype == np.float64
    assert np.all(np.isfinite(wp)) and np.all(np.abs(wp) <= 1000.0)
    np.testing.assert_array_equal(parse_waypoints(format_waypoints(wp)), wp)


@FAST
@given(st.one_of(
    st.text(),
    st.text(alphabet="0123456789.,- \n\t+eEnaif[]"),
    # near-valid: 15-17 two-decimal numbers, some beyond +-1000 m (a fair share parses)
    st.lists(st.integers(-101_000, 101_000).map(lambda c: f"{c / 100:.2f}"),
             min_size=15, max_size=17).map(",".join),
))
def test_garbage_parses_validly_or_raises_answer_parse_error(text):
    try:
        wp = parse_waypoints(text)
    except AnswerParseError as err:
        assert err.task == "planning" and err.raw_text == text
        return
    _check_valid(wp)


@FAST
@given(waypoints, st.data())
def test_mutated_answers_parse_validly_or_raise_answer_parse_error(wp, data):
    text = format_waypoints(wp)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = data.draw(st.sampled_from(list("0123456789.,- \nxe+")))
        if op == "insert":
            text = text[:i] + ch + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1:]
        else:
            text = text[:i] + ch + text[i + 1:]
    try:
        got = parse_waypoints(text)
    except AnswerParseError:
        return
    _check_valid(got)


@FAST
@given(non_str)
def test_non_str_inputs_raise_answer_parse_error(value):
    with pytest.raises(AnswerParseError):
        parse_waypoints(value)


@FAST
@given(waypoints)
def test_bytes_of_a_valid_answer_are_refused(wp):
    text = format_waypoints(wp)
    assume(text)
    with pytest.raises(AnswerParseError):
        parse_waypoints(text.encode("utf-8"))
