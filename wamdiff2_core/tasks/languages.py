"""The language of each task's answer, as a regular expression over the answer text.

Each language is exactly the set of texts the task's writer produces (``format_waypoints``,
``format_detections``, the simulator's closed answer sets), so a decoder that keeps its
answer inside the language (``wamdiff2_core.decoding.constraints``) always gives an answer
the task's strict parser accepts. The end of the answer (the end-of-answer token, repeated
to the end of the block as trained) is added by the decoder; the expression covers the text
only. Regular expressions use the syntax of Rust's ``regex`` crate (what outlines-core
compiles), which for these patterns is also Python's ``re``.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Sequence

from .planning import NUM_NUMBERS, NUM_WAYPOINTS, WAYPOINT_DT_S

#: The label the simulator's detection data uses (``wamdiff2_core.sim.detection.LABEL``).
DATA_LABELS: tuple[str, ...] = ("car",)


@dataclass(frozen=True)
class AnswerLanguage:
    """A task's answer language: ``regex`` (full match) over the answer text; ``name``
    identifies it in caches and messages."""
    name: str
    regex: str

    def __post_init__(self):
        if not isinstance(self.regex, str) or not self.regex:
            raise ValueError("an answer language needs a non-empty regular expression")
        try:
            re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"language {self.name!r}: bad regular expression ({exc})") \
                from None

    def matches(self, text: str) -> bool:
        """Whether ``text`` is a word of the language (Python's ``re``, for checks)."""
        return re.fullmatch(self.regex, text) is not None


def _alternation(words: Sequence[str]) -> str:
    return "(?:" + "|".join(re.escape(w) for w in words) + ")"


# A waypoint number exactly as ``_fmt2`` writes one within +-1000 m: no leading zeros, two
# decimals, never "-0.00". Digits as [0-9] (ASCII only, as the parser).
_NONNEG = r"(?:(?:0|[1-9][0-9]{0,2})\.[0-9]{2}|1000\.00)"
_NEG = r"-(?:0\.(?:0[1-9]|[1-9][0-9])|[1-9][0-9]{0,2}\.[0-9]{2}|1000\.00)"
WAYPOINT_NUMBER = f"(?:{_NONNEG}|{_NEG})"

# A detection grid coordinate: an integer 0..1000 without leading zeros.
GRID_INT = r"(?:0|[1-9][0-9]{0,2}|1000)"


#: The speed bound of the planning language's kinematic envelope, m/s: highway-env's
#: ``Vehicle.MAX_SPEED`` (no simulated vehicle drives faster; the generated data's fastest
#: waypoint is 26.7 m/s from the ego) and 144 km/h on a road.
PLAN_MAX_SPEED_MPS = 40.0


def int_range_regex(high: int, low: int = 0) -> str:
    """A regular expression for the integers ``low``..``high`` (``low`` 0 or 1) written
    without leading zeros (no look-arounds: Rust's ``regex`` has none)."""
    if low not in (0, 1) or high < low:
        raise ValueError(f"need low in (0, 1) and high >= low, got {low}..{high}")
    digits = str(high)
    if high < 10:
        return f"[{low}-{high}]" if high > low else str(high)
    parts = [f"[{low}-9]"] + [f"[1-9][0-9]{{{n - 1}}}" for n in range(2, len(digits))]
    # the numbers with as many digits as ``high``: a prefix of it, a smaller digit, any digits
    for i, d in enumerate(digits):
        first = 1 if i == 0 else 0
        if int(d) > first:
            rest = len(digits) - i - 1
            parts.append(digits[:i] + f"[{first}-{int(d) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    parts.append(digits)
    return "(?:" + "|".join(parts) + ")"


def _number_upto(metres: int) -> str:
    """A waypoint number as ``_fmt2`` writes it with an integer part of at most ``metres``."""
    if metres >= 1000:
        return WAYPOINT_NUMBER
    neg = r"0\.(?:0[1-9]|[1-9][0-9])"
    if metres >= 1:
        neg += "|" + int_range_regex(metres, 1) + r"\.[0-9]{2}"
    return rf"(?:{int_range_regex(metres)}\.[0-9]{{2}}|-(?:{neg}))"


def planning_language(max_speed: float | None = PLAN_MAX_SPEED_MPS) -> AnswerLanguage:
    """The planning answer: 16 waypoint numbers joined by commas, as ``format_waypoints``
    writes them, inside a kinematic envelope: each coordinate of a waypoint at t s (0.5 ..
    4.0) within ``max_speed`` x t' of the ego, t' being t rounded up to a whole second
    (|x|, |y| <= floor(max_speed t') + 0.99 m). A plan no vehicle could drive (a waypoint
    90 m ahead after 2 s at 40 m/s, or 1000 m to the side) is then never decoded, while
    every plan of the data is a word. ``max_speed=None``: the parser's whole range, |v| <=
    1000 m.

    Whole seconds, not each waypoint's own time, because outlines-core's compile time
    grows steeply with the number of distinct number patterns (4 compile in ~0.2 s, 8 in
    ~5 s on this project's CPU).

    Raises:
        ValueError: ``max_speed`` not > 0.
    """
    if max_speed is None:
        regex = WAYPOINT_NUMBER + f"(?:,{WAYPOINT_NUMBER}){{{NUM_NUMBERS - 1}}}"
        return AnswerLanguage("planning", regex)
    if not max_speed > 0:
        raise ValueError(f"max_speed must be > 0 m/s, got {max_speed}")
    bounds = [int(max_speed * math.ceil(k * WAYPOINT_DT_S - 1e-9) + 1e-9)
              for k in range(1, NUM_WAYPOINTS + 1)]
    runs: list[list] = []                        # [bound, how many numbers] in order
    for bound in bounds:
        if runs and runs[-1][0] == bound:
            runs[-1][1] += 2
        else:
            runs.append([bound, 2])
    parts = []
    for bound, count in runs:                    # repetitions, as outlines compiles fastest
        number = _number_upto(bound)
        lead = "" if parts else number
        reps = count - (0 if parts else 1)
        parts.append(lead + (f"(?:,{number}){{{reps}}}" if reps else ""))
    return AnswerLanguage(f"planning<={max_speed:g}m/s", "".join(parts))


def detection_language(labels: Sequence[str] = DATA_LABELS,
                       max_boxes: int | None = None) -> AnswerLanguage:
    """The detection answer as ``format_detections`` writes it (``json.dumps``: ", " and
    ": " separators): ``[]`` or a list of ``{"bbox_2d": [x1, y1, x2, y2], "label": L}``
    objects with integer grid coordinates in 0..1000 and L one of ``labels``.

    ``max_boxes`` bounds the list (None: as many as the token budget allows). The corner
    order (x1 <= x2, y1 <= y2) that the parser also checks is not part of the language: it
    is not regular at a usable size (the automaton would have to remember x1 and y1 while
    reading x2 and y2: a million states per box).

    Raises:
        ValueError: no labels, a blank label, or ``max_boxes`` < 0.
    """
    labels = tuple(labels)
    if not labels or not all(isinstance(lb, str) and lb.strip() for lb in labels):
        raise ValueError(f"labels must be non-blank strings, got {labels!r}")
    if max_boxes is not None and max_boxes < 0:
        raise ValueError(f"max_boxes must be >= 0, got {max_boxes}")
    label = _alternation([json.dumps(lb, ensure_ascii=False) for lb in labels])
    box = (r'\{"bbox_2d": \[' + ", ".join([GRID_INT] * 4) + r'\], "label": ' + label + r"\}")
    if max_boxes == 0:
        return AnswerLanguage("detection", r"\[\]")
    more = "*" if max_boxes is None else f"{{0,{max_boxes - 1}}}"
    name = "detection" + ("" if max_boxes is None else f"<={max_boxes}") + \
        ("" if labels == DATA_LABELS else ":" + "|".join(labels))
    return AnswerLanguage(name, rf"\[\]|\[{box}(?:, {box}){more}\]")


def qa_language(choices: Sequence[str] | None = None) -> AnswerLanguage:
    """A QA answer: one of ``choices`` exactly (e.g. a simulator template's answer set), or,
    without choices, any text holding a non-blank character (what ``parse_answer`` takes).

    Raises:
        ValueError: an empty or blank choice, or an empty list.
    """
    if choices is None:
        return AnswerLanguage("qa", r"\s*\S[\s\S]*")
    choices = tuple(choices)
    if not choices or not all(isinstance(c, str) and c.strip() == c and c for c in choices):
        raise ValueError("choices must be non-empty strings without surrounding whitespace, "
                         f"got {choices!r}")
    return AnswerLanguage("qa:" + "|".join(choices), _alternation(choices))
