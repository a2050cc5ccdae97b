"""Text a caller puts into a prompt (a question, an answer written into a record).

A prompt is plain text with image placeholders: the processor turns each ``<image>`` into
an image and tokenizes everything else as plain text with special tokens off, so
``<|im_end|>`` in a question is those eleven characters, never the end of the turn
(``wamdiff2_core.model.processor``). The one thing a caller's text could still change is
the number of images: a placeholder in it would be read as the template's own. Every prompt
builder therefore passes caller text through :func:`user_text`, which refuses any of
:data:`PLACEHOLDERS`; closed-set values (the navigation command) are checked against their
set instead.
"""
from __future__ import annotations

from typing import Any

IMAGE_PLACEHOLDER = "<image>"
#: Every string the processor expands into something that is not text. A template may
#: introduce new ones (e.g. one per camera); they belong here so that user text stays text.
PLACEHOLDERS: tuple[str, ...] = (IMAGE_PLACEHOLDER,)


class UserTextError(ValueError):
    """Caller text that cannot go into a prompt (blank, or holding a placeholder); the
    message is one sentence naming the argument."""


def user_text(name: str, text: Any) -> str:
    """``text`` stripped, as a plain ``str``, ready to be written into a prompt.

    Raises:
        TypeError: a non-str ``text``.
        UserTextError: a blank text, or one holding a placeholder (``<image>``), which the
            processor would read as an image of the template.
    """
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    text = str.__str__(text).strip()
    if not text:
        raise UserTextError(f"{name} must not be empty or blank")
    for placeholder in PLACEHOLDERS:
        if placeholder in text:
            raise UserTextError(f"{name} must not contain {placeholder!r}: it is the prompt's "
                                f"image placeholder")
    return text
