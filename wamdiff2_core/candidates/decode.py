"""From a candidate row plan to a :class:`~.sets.CandidateSet`: the batch's prompts, one
decode, the answers parsed.

The decode itself is the caller's (the planner's engine): ``decode_rows(prompts, images,
temperatures)`` decodes one batch, row i at ``temperatures[i]`` (0: greedy), and returns
each row's answer text, per-token confidences and the batch's ``DecodeStats``.
"""
from __future__ import annotations

from typing import Callable, Sequence

from wamdiff2_core import tasks
from wamdiff2_core.candidates.config import Row
from wamdiff2_core.candidates.sets import Candidate, CandidateSet
from wamdiff2_core.decoding.config import DecodeStats

Decoded = tuple[list[str], list[Sequence[float]], DecodeStats]
#: (prompts, image lists, temperature per row) -> texts, confidences per row, stats.
DecodeRows = Callable[[list[str], list[list], list[float]], Decoded]


def decode_candidates(decode_rows: DecodeRows, prompt_for: Callable[[str], str],
                      images: list, rows: Sequence[Row]) -> CandidateSet:
    """The candidates of ``rows`` (``config.row_plan``) for one frame's ``images``, one
    batch; ``prompt_for(command)`` writes the frame's planning prompt stating ``command``.
    An answer that does not parse is kept as an invalid candidate with its reason."""
    texts, confidences, stats = decode_rows([prompt_for(r.command) for r in rows],
                                            [images] * len(rows),
                                            [r.temperature for r in rows])
    return CandidateSet([parse_candidate(text, row, conf)
                         for text, row, conf in zip(texts, rows, confidences)], stats=stats)


def parse_candidate(text: str, row: Row, confidences: Sequence[float] = ()) -> Candidate:
    """A candidate of one answer: its waypoints, or (unparseable) the reason."""
    conf = tuple(float(c) for c in confidences)
    try:
        waypoints = tasks.parse_waypoints(text)
    except tasks.AnswerParseError as exc:
        return Candidate(None, text, row.command, row.temperature, conf, exc.reason)
    return Candidate(waypoints, text, row.command, row.temperature, conf)
