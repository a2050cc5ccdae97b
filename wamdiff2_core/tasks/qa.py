"""Question answering task: a free-text question about the scene, a free-text answer."""
from __future__ import annotations

from typing import Sequence

from .cameras import DEFAULT_CAMERAS, scene_prefix
from .errors import AnswerParseError, as_text
from .text import user_text

TASK = "qa"

_QA_BODY = "Question: {question}\nAnswer the question briefly."


def qa_prompt(question: str, cameras: Sequence[str] = DEFAULT_CAMERAS) -> str:
    """The QA user turn: the shared scene opening (one "<image>" per camera) and the
    question, stripped.

    The question is plain text: special tokens in it stay text (the processor never reads
    them as markup); only a placeholder would change the prompt, so it is refused.

    Raises:
        TypeError: a non-str question.
        UserTextError: (a ValueError) a blank question, or one containing "<image>" (the
            prompt must hold exactly the template's placeholders).
        ValueError: a bad camera list (``cameras.check_cameras``).
    """
    return scene_prefix(cameras) + _QA_BODY.format(question=user_text("question", question))


def format_answer(text: str) -> str:
    """The QA answer for *text*: the text with surrounding whitespace stripped.

    ``parse_answer(format_answer(t)) == format_answer(t)`` for every accepted *t*.

    Raises:
        TypeError: a non-str text.
        UserTextError: (a ValueError) a blank text, or one containing "<image>".
    """
    return user_text("answer", text)


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
