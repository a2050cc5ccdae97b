"""The candidate plans of one frame and the scorer's choice among them (plain, torch-free
types: the node and the simulator import them directly)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from wamdiff2_core.decoding.config import DecodeStats


@dataclass(frozen=True)
class Candidate:
    """One decoded plan. ``confidences``: per answer token (end of answer included), the
    model's probability of the token when it was committed (empty where the decoder did not
    say); ``command`` / ``temperature``: the row of the batch that wrote it."""

    waypoints: np.ndarray | None         # (8, 2) ego frame; None: the answer did not parse
    text: str
    command: str
    temperature: float
    confidences: tuple[float, ...] = ()
    error: str = ""                      # why ``waypoints`` is None

    @property
    def valid(self) -> bool:
        return self.waypoints is not None

    @property
    def log_confidence(self) -> float:
        """Mean log probability of the answer's tokens (0 where unknown, -inf where a token
        had probability 0)."""
        if not self.confidences:
            return 0.0
        return float(np.mean([math.log(c) if c > 0 else -math.inf
                              for c in self.confidences]))

    @property
    def min_confidence(self) -> float:
        return float(min(self.confidences)) if self.confidences else 1.0


@dataclass
class Selection:
    """What a scorer made of a candidate set: one score per candidate (higher is better;
    -inf for a candidate it rules out), the chosen index, the margin of the chosen over the
    runner-up, and, when the scorer failed, why (the choice is then the most confident valid
    candidate)."""

    scorer: str
    scores: list[float]
    chosen: int
    margin: float
    fallback: str = ""

    def to_json(self) -> dict:
        return {"scorer": self.scorer, "chosen": self.chosen,
                "scores": [None if not math.isfinite(s) else round(s, 6)
                           for s in self.scores],
                "margin": None if not math.isfinite(self.margin) else round(self.margin, 6),
                "fallback": self.fallback or None}


@dataclass
class CandidateSet:
    """The K candidates of one frame (row order of the batch; row 0 is the greedy plan for
    the frame's own command) and the selection."""

    candidates: list[Candidate]
    selection: Selection | None = None
    stats: DecodeStats = field(default_factory=DecodeStats)     # the batch's decode cost

    def __len__(self) -> int:
        return len(self.candidates)

    @property
    def chosen(self) -> Candidate:
        index = self.selection.chosen if self.selection is not None else 0
        return self.candidates[index]

    def waypoints(self) -> np.ndarray:
        """(K, 8, 2) every candidate's waypoints, NaN where one did not parse."""
        out = np.full((len(self), 8, 2), np.nan)
        for i, c in enumerate(self.candidates):
            if c.valid:
                out[i] = c.waypoints
        return out

    def valid_indices(self) -> list[int]:
        return [i for i, c in enumerate(self.candidates) if c.valid]

    def most_confident(self) -> int | None:
        """The valid candidate with the highest mean log confidence (the first on ties),
        None when none parsed."""
        valid = self.valid_indices()
        if not valid:
            return None
        return max(valid, key=lambda i: (self.candidates[i].log_confidence, -i))
