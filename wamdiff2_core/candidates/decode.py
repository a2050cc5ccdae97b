"""From a candidate row plan to a :class:`~.sets.CandidateSet`: the batch's prompts, one
decode, the answers parsed.

The decode itself is the caller's (the planner's engine): ``decode_rows(prompts, images,
temperature)`` returns each row's answer text and per-token confidences. Rows that share a
temperature go into one call, so a plan of a greedy row 0 and K - 1 rows sampled at one
temperature is one call per temperature.
"""
from __future__ import annotations

from typing import Callable, Sequence

from wamdiff2_core import tasks
from wamdiff2_core.candidates.config import Row
from wamdiff2_core.candidates.sets import Candidate, CandidateSet

#: (prompts, image lists, temperature) -> (answer texts, per-token confidences) per row.
DecodeRows = Callable[[list[str], list[list], float],
                      tuple[list[str], list[Sequence[float]]]]


def decode_candidates(decode_rows: DecodeRows, prompt_for: Callable[[str], str],
                      images: list, rows: Sequence[Row]) -> CandidateSet:
    """The candidates of ``rows`` (``config.row_plan``) for one frame's ``images``;
    ``prompt_for(command)`` writes the frame's planning prompt stating ``command``. An
    answer that does not parse is kept as an invalid candidate with its reason."""
    out: list[Candidate | None] = [None] * len(rows)
    for temperature in dict.fromkeys(r.temperature for r in rows):   # first-seen order
        index = [i for i, r in enumerate(rows) if r.temperature == temperature]
        prompts = [prompt_for(rows[i].command) for i in index]
        texts, confidences = decode_rows(prompts, [images] * len(index), temperature)
        for i, text, conf in zip(index, texts, confidences):
            out[i] = parse_candidate(text, rows[i], conf)
    return CandidateSet(list(out))


def parse_candidate(text: str, row: Row, confidences: Sequence[float] = ()) -> Candidate:
    """A candidate of one answer: its waypoints, or (unparseable) the reason."""
    conf = tuple(float(c) for c in confidences)
    try:
        waypoints = tasks.parse_waypoints(text)
    except tasks.AnswerParseError as exc:
        return Candidate(None, text, row.command, row.temperature, conf, exc.reason)
    return Candidate(waypoints, text, row.command, row.temperature, conf)
