"""Run-time scorers: rank a frame's candidates with what the planner has, pick one.

Each scorer maps ``(features (K, F), candidate set, context)`` to one score per candidate
(higher is better, -inf rules a candidate out); ``select`` applies one and never fails the
frame: when the scorer raises, or rules out every valid candidate, the choice falls back to
the most confident valid candidate and the selection says why.

- ``confidence``: the model's own mean log probability of the answer's tokens.
- ``consensus``: the candidate closest to the others (minimum Bayes risk over the set: a
  plan most samples agree with), ties to the more confident.
- ``rules``: the plan's own kinematics, PDMS-shaped: comfort bounds as a gate (a plan that
  breaks them scores below every one that keeps them), then progress, agreement with the
  set and the model's confidence, weighted (``RULE_WEIGHTS``).
- ``learned``: a linear model over ``features.FEATURES`` fitted to the privileged closed
  loop score of simulator candidates (``candidates.learned``; weights from a file).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from wamdiff2_core.candidates.config import SCORER_NAMES, CandidateConfigError
from wamdiff2_core.candidates.features import FEATURES, ScoringContext, feature_matrix
from wamdiff2_core.candidates.learned import LinearScorer, ScorerWeightsError
from wamdiff2_core.candidates.sets import CandidateSet, Selection

Scorer = Callable[[np.ndarray, CandidateSet, ScoringContext], np.ndarray]
COLUMN = {name: i for i, name in enumerate(FEATURES)}
#: Weights of the rules scorer's soft terms (each in [0, 1]).
RULE_WEIGHTS = {"progress": 5.0, "agreement": 5.0, "confidence": 2.0}


class ScorerError(RuntimeError):
    """A scorer could not score a frame; the message says why."""


def _column(features: np.ndarray, name: str) -> np.ndarray:
    return features[:, COLUMN[name]]


def confidence_scores(features: np.ndarray, cset: CandidateSet,
                      context: ScoringContext) -> np.ndarray:
    if not any(c.confidences for c in cset.candidates):
        raise ScorerError("the decoder reported no token confidences")
    return _column(features, "log_conf")


def consensus_scores(features: np.ndarray, cset: CandidateSet,
                     context: ScoringContext) -> np.ndarray:
    # a tie (two identical plans) goes to the more confident: a tiny confidence term
    return -_column(features, "consensus") + 1e-6 * _column(features, "log_conf")


def rule_scores(features: np.ndarray, cset: CandidateSet,
                context: ScoringContext) -> np.ndarray:
    agreement = 1.0 / (1.0 + _column(features, "consensus"))
    confidence = np.exp(_column(features, "log_conf"))
    w = RULE_WEIGHTS
    soft = (w["progress"] * np.clip(_column(features, "progress"), 0.0, 1.0)
            + w["agreement"] * agreement + w["confidence"] * confidence) / sum(w.values())
    return soft + _column(features, "comfort_ok")          # the gate: +1 when comfortable


def learned_scores(weights: LinearScorer) -> Scorer:
    def score(features: np.ndarray, cset: CandidateSet, context: ScoringContext
              ) -> np.ndarray:
        return weights.predict(features)
    return score


SCORERS: dict[str, Scorer] = {
    "confidence": confidence_scores,
    "consensus": consensus_scores,
    "rules": rule_scores,
}


def make_scorer(name: str, weights: str | Path | None = None) -> Scorer:
    """The scorer called ``name``; ``learned`` reads its weights from ``weights`` (a
    ``candidates fit`` file). CandidateConfigError naming the reason when it cannot be
    built (an unknown name, the learned scorer without a readable weights file)."""
    if name == "learned":
        if weights is None:
            raise CandidateConfigError("the learned candidate scorer needs a weights file "
                                       "(`wamdiff2 candidates fit`); none was given and the "
                                       "checkpoint has none")
        try:
            return learned_scores(LinearScorer.load(weights))
        except ScorerWeightsError as exc:
            raise CandidateConfigError(str(exc)) from None
    if name not in SCORERS:
        raise CandidateConfigError(f"unknown candidate scorer {name!r}; use one of "
                                   f"{', '.join(SCORER_NAMES)}")
    return SCORERS[name]


def select(cset: CandidateSet, context: ScoringContext, name: str,
           scorer: Scorer) -> Selection:
    """Score ``cset`` with ``scorer`` (called ``name``) and choose; on a scorer failure the
    most confident valid candidate, with the reason in ``fallback``. Row 0 when no
    candidate parsed (the caller reports that plan's parse error)."""
    k = len(cset)
    valid = cset.valid_indices()
    if not valid:
        return Selection(name, [-math.inf] * k, 0, math.nan, "no candidate parsed")
    try:
        features = feature_matrix(cset, context)
        scores = np.asarray(scorer(features, cset, context), dtype=np.float64).reshape(-1)
        if scores.shape != (k,):
            raise ScorerError(f"{k} candidates but {scores.size} scores")
        scores = np.where(np.isnan(scores), -math.inf, scores)
        mask = np.full(k, -math.inf)
        mask[valid] = 0.0
        scores = scores + mask
        if not np.isfinite(scores).any():
            raise ScorerError("it ruled out every candidate")
    except Exception as exc:       # a scorer failure never costs the frame its plan
        index = cset.most_confident()
        reason = f"scorer {name} failed ({type(exc).__name__}: {exc}); chose the most " \
                 f"confident candidate"
        return Selection(name, [-math.inf] * k, index, math.nan, reason)
    order = np.argsort(-scores, kind="stable")
    chosen = int(order[0])
    runner_up = scores[order[1]] if len(valid) > 1 else -math.inf
    margin = float(scores[chosen] - runner_up) if math.isfinite(runner_up) else math.inf
    return Selection(name, [float(s) for s in scores], chosen, margin)
