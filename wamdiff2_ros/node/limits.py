"""Bounds on the node's unbounded inputs: commands, questions and stamps.

Each check returns the accepted value or raises `BadInput` whose kind is the diagnostics
counter and whose message quotes at most `echo` characters of the input (a 100 KB command
is never copied into a log line or a /diagnostics message).
"""
from __future__ import annotations

from typing import Callable

from wamdiff2_core.tasks import COMMANDS, UserTextError, user_text
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.logs import clip


def check_command(text: str, max_chars: int, echo: int) -> str:
    """The navigation command `text` names (stripped, lower case).

    BadInput ``command_too_long`` past `max_chars` characters (checked before anything else
    is done with it), ``command_unknown`` for anything but left, right or straight.
    """
    if len(text) > max_chars:
        raise BadInput("command_too_long", f"command of {len(text)} characters refused "
                                           f"(max_command_chars {max_chars})")
    command = text.strip().lower()
    if command not in COMMANDS:
        raise BadInput("command_unknown", f"unknown command {clip(text, echo)} (expected one "
                                          f"of {', '.join(COMMANDS)})")
    return command


def check_question(text: str, max_chars: int, max_tokens: int,
                   count_tokens: Callable[[str], int] | None) -> str:
    """The question `text`, stripped: characters first (so an enormous string is never
    tokenized), then tokens with `count_tokens` (None: not configured yet, skipped).

    BadInput ``question_too_long`` past either limit, ``question_empty`` when blank,
    ``question_placeholder`` when it holds the prompt's image placeholder (any other text,
    special tokens included, is answered as plain text).
    """
    if len(text) > max_chars:
        raise BadInput("question_too_long", f"question of {len(text)} characters refused "
                                            f"(max_question_chars {max_chars})")
    question = text.strip()
    if not question:
        raise BadInput("question_empty", "empty question")
    try:
        user_text("question", question)
    except UserTextError as exc:
        raise BadInput("question_placeholder", f"question refused: {exc}") from None
    if count_tokens is not None:
        tokens = count_tokens(question)
        if tokens > max_tokens:
            raise BadInput("question_too_long", f"question of {tokens} tokens refused "
                                                f"(max_question_tokens {max_tokens})")
    return question


def check_not_future(stamp_s: float, now_s: float, max_future_s: float, what: str,
                     kind: str) -> None:
    """BadInput `kind` when `stamp_s` is more than `max_future_s` ahead of `now_s` (the node
    clock); 0 disables the check, and a clock still at 0 (use_sim_time before the first
    /clock message) is not checked against."""
    if max_future_s > 0 and now_s > 0 and stamp_s - now_s > max_future_s:
        raise BadInput(kind, f"{what} stamped {stamp_s:.3f} is {stamp_s - now_s:.2f} s ahead "
                             f"of the node clock (max_future_s {max_future_s:g}); dropped")
