"""The one error every task parser raises: :class:`AnswerParseError`."""
from __future__ import annotations

from typing import Any

_PREVIEW_CHARS = 200


def _preview(text: str) -> str:
    """A short, printable form of *text* for error messages (the full text stays in .raw_text)."""
    if len(text) <= _PREVIEW_CHARS:
        return repr(text)
    return repr(text[:_PREVIEW_CHARS]) + f"... ({len(text)} chars)"


class AnswerParseError(ValueError):
    """A model answer (or generated prompt) that does not follow its task's format.

    Attributes:
        task: which parser rejected it: "planning", "detection", "qa" or "planning_prompt".
        raw_text: the text exactly as given; for an input that was not a ``str`` at all
            (None, bytes, a number ...) its ``repr()``, so ``raw_text`` is always a ``str``.
        reason: one short sentence saying what is wrong.

    It subclasses ``ValueError`` so ``except ValueError`` still catches it; the parsers in
    this package never raise any other exception type for a bad input text.
    """

    def __init__(self, task: str, raw_text: Any, reason: str):
        if isinstance(raw_text, str):
            raw_text = str.__str__(raw_text)   # a plain str, even for a str subclass
        else:
            raw_text = _safe_repr(raw_text)
        self.task = str(task)
        self.raw_text = raw_text
        self.reason = str(reason)
        super().__init__(f"malformed {self.task} answer: {self.reason} "
                         f"(raw text: {_preview(self.raw_text)})")

    def __reduce__(self):
        # Exceptions with a custom __init__ do not pickle by default; data-loader worker
        # processes and multiprocessing pools need them to.
        return (type(self), (self.task, self.raw_text, self.reason))


def _safe_repr(obj: Any) -> str:
    try:
        return repr(obj)
    except Exception:  # a broken __repr__ must not turn into a different exception type
        return f"<unrepresentable {type(obj).__name__}>"


def _type_name(obj: Any) -> str:
    return type(obj).__name__


def as_text(task: str, text: Any) -> str:
    """*text* as a plain ``str``, or :class:`AnswerParseError` if it is not a ``str``.

    ``bytes`` are refused too rather than decoded: an answer that arrives as bytes means the
    caller skipped the tokenizer's decode step, which is a bug to surface, not to paper over.
    """
    if not isinstance(text, str):
        raise AnswerParseError(task, text, f"expected str, got {_type_name(text)}")
    return str.__str__(text)
