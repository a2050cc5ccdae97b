"""Question answering: exact match after normalisation.

Normalisation strips surrounding whitespace, lower-cases, and collapses inner runs of
whitespace to one space; nothing else (punctuation counts), so "Two cars" matches
"two  cars" but not "two cars.".
"""
from __future__ import annotations

from collections.abc import Iterable


def normalise_answer(text: str) -> str:
    """The form two answers are compared in."""
    return " ".join(str(text).split()).lower()


def exact_match(prediction: str, answer: str) -> bool:
    """Whether ``prediction`` equals ``answer`` after :func:`normalise_answer`."""
    return normalise_answer(prediction) == normalise_answer(answer)


def in_answer_set(prediction: str, answer_set: Iterable[str]) -> bool:
    """Whether ``prediction`` is one of the question's valid answers (normalised)."""
    target = normalise_answer(prediction)
    return any(target == normalise_answer(option) for option in answer_set)
