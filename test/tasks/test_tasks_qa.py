"""QA task: free-text answers; the parser strips whitespace and refuses empty text."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff2_core.tasks import AnswerParseError, format_answer, parse_answer, qa_prompt

FAST = settings(max_examples=200, deadline=None)
non_str = st.one_of(st.none(), st.binary(), st.integers(), st.floats(), st.booleans(),
                    st.lists(st.text()), st.dictionaries(st.text(), st.integers()))
answers = st.text().filter(lambda s: s.strip() and "<image>" not in s)


def test_prompt_holds_one_placeholder_and_the_stripped_question():
    prompt = qa_prompt("  Is the traffic light red?\n")
    assert prompt.count("<image>") == 1
    assert "Question: Is the traffic light red?\n" in prompt
    assert prompt.startswith("Here is a front-view images from a driving vehicle: <image>\n")


@pytest.mark.parametrize("question", ["", "   \n", "what is in <image>?"])
def test_prompt_refuses_blank_questions_and_placeholders(question):
    with pytest.raises(ValueError):
        qa_prompt(question)


@pytest.mark.parametrize("question", [None, b"why?", 3])
def test_prompt_refuses_non_str(question):
    with pytest.raises(TypeError):
        qa_prompt(question)


def test_format_answer_strips_and_validates():
    assert format_answer("  Yes, it is red.\n") == "Yes, it is red."
    with pytest.raises(ValueError):
        format_answer(" \t ")
    with pytest.raises(TypeError):
        format_answer(None)


@pytest.mark.parametrize("text", ["", " ", "\n\t ", "\u3000"])
def test_parse_refuses_empty(text):
    with pytest.raises(AnswerParseError) as info:
        parse_answer(text)
    assert info.value.task == "qa" and info.value.raw_text == text


def test_parse_strips():
    assert parse_answer("\n  Two cars.  \n") == "Two cars."


@FAST
@given(answers)
def test_round_trip(text):
    formatted = format_answer(text)
    assert formatted == text.strip()
    assert parse_answer(formatted) == formatted
    assert parse_answer(" " + formatted + "\n") == formatted


@FAST
@given(st.text())
def test_any_text_parses_to_its_stripped_form_or_raises_answer_parse_error(text):
    try:
        got = parse_answer(text)
    except AnswerParseError as err:
        assert not text.strip() and err.raw_text == text
        return
    assert got == text.strip() and got


@FAST
@given(answers)
def test_truncation_is_caught_only_when_nothing_is_left(text):
    # Free text: a cut answer cannot be told from a short one; only a blank prefix fails.
    for k in range(len(text) + 1):
        prefix = text[:k]
        if prefix.strip():
            assert parse_answer(prefix) == prefix.strip()
        else:
            with pytest.raises(AnswerParseError):
                parse_answer(prefix)


@FAST
@given(non_str)
def test_non_str_inputs_raise_answer_parse_error(value):
    with pytest.raises(AnswerParseError) as info:
        parse_answer(value)
    assert isinstance(info.value.raw_text, str)
