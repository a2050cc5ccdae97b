"""Question answering task: a free-text question about the scene, a free-text answer."""
from __future__ import annotations

from typing import Any

from .errors import AnswerParseError, as_text
from .planning import IMAGE_PLACEHOLDER, SCENE_PREFIX

TASK = "qa"

_QA_TEMPLATE = SCENE_PREFIX + "Question: {question}\nAnswer the question briefly."


def _clean_text(name: str, text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    text = str.__str__(text).strip()
    if not text:
        raise ValueError(f"{name} must not be empty or blank")
    if IMAGE_PLACEHOLDER in text:
        raise ValueError(f"{name} must not contain the {IMAGE_PLACEHOLDER!r} placeholder")
    return text


def qa_prompt(question: str) -> str:
    """The QA user turn: the shared scene opening (one "<image>") and the question, stripped.

    Raises:
        TypeError: a non-str question.
        ValueError: a blank question, or one containing "<image>" (the prompt must hold
            exactly one placeholder).
    """
    return _QA_TEMPLATE.format(question=_clean_text("question", question))


def format_answer(text: str) -> str:
    """The QA answer for *text*: the text with surrounding whitespace stripped.

    ``parse_answer(format_answer(t)) == format_answer(t)`` for every accepted *t*.

    Raises:
        TypeError: a non-str text.
        ValueError: a blank text, or one containing "<image>".
    """
    return _clean_text("answer", text)


def parse_answer(text: str) -> str:
    """A model's QA answer with surrounding whitespace stripped.

    Any non-blank text is a valid answer. A truncated answer cannot be told from a short
    one, so truncation is caught only when nothing but whitespace is left.

    Raises:
        AnswerParseError: (task "qa") for an empty or whitespace-only text, and for
            non-str inputs (None, bytes, numbers ...); never any other exception type.
    """
    raw = as_text(TASK, text)
    answer = raw.strip()
    if not answer:
        raise AnswerParseError(TASK, raw, "empty answer")
    return answer
