"""A planner's candidate step: K rows of one batch, parsed, scored, one chosen.

The planner owns one :class:`CandidatePicker` (built from its ``CandidateConfig``, the
scorer and its weights checked up front) and hands it, per frame, its decoder and its
prompt writer; the picker never sees a model or a world.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from wamdiff2_core.candidates.config import CandidateConfig, row_plan
from wamdiff2_core.candidates.decode import DecodeRows, decode_candidates
from wamdiff2_core.candidates.features import ScoringContext
from wamdiff2_core.candidates.scorers import make_scorer, select
from wamdiff2_core.candidates.sets import CandidateSet

#: The file a checkpoint directory keeps its learned candidate scorer's weights in.
WEIGHTS_FILE = "candidate_scorer.json"


def checkpoint_weights(checkpoint: str | Path | None) -> Path | None:
    """The learned scorer's weights a checkpoint directory ships, or None."""
    if checkpoint is None:
        return None
    path = Path(checkpoint) / WEIGHTS_FILE
    return path if path.is_file() else None


class CandidatePicker:
    """Decodes ``config.k`` candidates per frame and chooses one with ``config.scorer``
    (``weights``: the learned scorer's file). Raises CandidateConfigError when the scorer
    cannot be built."""

    def __init__(self, config: CandidateConfig, weights: str | Path | None = None):
        self.config = config
        self.weights = Path(weights) if weights is not None else None
        self.scorer = make_scorer(config.scorer, self.weights)

    def pick(self, decode_rows: DecodeRows, prompt_for: Callable[[str], str], images: list,
             context: ScoringContext) -> CandidateSet:
        """The frame's candidates (row 0: the greedy plan for its command) with the
        selection; never raises for a bad answer or a failing scorer (the selection says
        so)."""
        rows = row_plan(self.config, context.command)
        cset = decode_candidates(decode_rows, prompt_for, images, rows)
        cset.selection = select(cset, context, self.config.scorer, self.scorer)
        return cset

    def describe(self) -> str:
        """One line for logs, e.g. "8 candidates (sample at T 0.7), scorer learned"."""
        c = self.config
        where = f" ({self.weights})" if c.scorer == "learned" else ""
        return (f"{c.k} candidates ({c.diversity}, sampled at T {c.temperature:g}), scorer "
                f"{c.scorer}{where}")
