"""Closed-loop planners that decode K candidate plans per frame and drive the chosen one.

The planner (``Planner.plan_candidates``) is handed a plain :class:`Observation` built here
from the frame: images, command, ego motion, stamp. The simulator's privileged extras of a
:class:`SimObservation` (the expert's waypoints, the candidate oracle) never reach it, so
its scorer ranks with what a vehicle has. Three choices:

- ``scorer``: the planner's own choice (its run-time scorer);
- ``oracle``: the best candidate by the privileged score (``sim.candidate_oracle``), the
  ceiling a run-time scorer could reach with these candidates. Report-only: a planner has
  no such option;
- ``greedy``: row 0, the plan a planner without candidates drives (collecting training
  frames on its own state distribution).

A :class:`CandidateLog` keeps one record per frame (the selection, and where the oracle ran,
every candidate's privileged outcome and features: the learned scorer's training rows).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from wamdiff2_core.candidates import CandidateSet, ScoringContext, feature_matrix
from wamdiff2_core.candidates.config import CHOICES
from wamdiff2_core.sim.planners import PlannerFn, SimObservation, check_rig
from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.types import Observation, PlanResult


class CandidatePlanner(Protocol):
    def plan_candidates(self, observation: Observation) -> CandidateSet: ...


def public_observation(observation: Observation) -> Observation:
    """The run-time part of a frame's observation: nothing privileged is copied."""
    return Observation(images=list(observation.images), command=observation.command,
                       velocity=tuple(observation.velocity),
                       acceleration=tuple(observation.acceleration),
                       position=tuple(observation.position), stamp=observation.stamp)


@dataclass
class CandidateLog:
    """Per-frame records of a candidates planner in the closed loop."""

    frames: list[dict] = field(default_factory=list)

    def add(self, observation: Observation, cset: CandidateSet, chosen: int,
            outcomes: list | None, expert: np.ndarray | None) -> None:
        context = ScoringContext(observation.command, tuple(observation.velocity),
                                 tuple(observation.acceleration))
        record: dict[str, Any] = {
            "stamp": observation.stamp, "command": observation.command,
            "velocity": list(observation.velocity), "chosen": chosen,
            "selection": cset.selection.to_json() if cset.selection else None,
            "candidates": [{"text": c.text, "command": c.command,
                            "temperature": c.temperature, "valid": c.valid,
                            "log_confidence": round(c.log_confidence, 6)}
                           for c in cset.candidates]}
        if outcomes is not None:
            features = feature_matrix(cset, context)
            record["features"] = [[None if math.isnan(v) else round(float(v), 6) for v in row]
                                  for row in features]
            record["oracle"] = [o.to_json() if o is not None else None for o in outcomes]
        if expert is not None:
            record["l2_chosen_m"] = _l2(cset, chosen, expert)
            record["l2_greedy_m"] = _l2(cset, 0, expert)
        self.frames.append(record)

    def summary(self) -> dict:
        """Counts and means over the frames: how often the choice left the greedy plan, the
        scorer's fallbacks and margins, the chosen and greedy plans' L2 to the expert's
        (privileged, report only) and, where the oracle ran, the privileged score of the
        chosen, the greedy and the best candidate."""
        frames = self.frames
        out: dict[str, Any] = {"frames": len(frames)}
        if not frames:
            return out
        sel = [f["selection"] for f in frames if f["selection"]]
        margins = [s["margin"] for s in sel if s["margin"] is not None]
        out.update(not_greedy=round(float(np.mean([f["chosen"] != 0 for f in frames])), 4),
                   fallbacks=sum(bool(s["fallback"]) for s in sel),
                   margin_median=round(float(np.median(margins)), 6) if margins else None)
        for key in ("l2_chosen_m", "l2_greedy_m"):
            values = [f[key] for f in frames if f.get(key) is not None]
            out[key] = round(float(np.mean(values)), 4) if values else None
        labelled = [f for f in frames if "oracle" in f]
        if labelled:
            def mean_score(pick):
                return round(float(np.mean([pick(f) for f in labelled])), 4)
            out["oracle_score"] = {
                "chosen": mean_score(lambda f: _score(f, f["chosen"])),
                "greedy": mean_score(lambda f: _score(f, 0)),
                "best": mean_score(lambda f: max(_score(f, i) for i in range(len(f["oracle"]))))}
        return out


def _score(frame: dict, index: int) -> float:
    outcome = frame["oracle"][index]
    return outcome["score"] if outcome is not None else 0.0


def _l2(cset: CandidateSet, index: int, expert: np.ndarray) -> float | None:
    """Mean displacement [m] over the 8 waypoints of a candidate from the expert's."""
    cand = cset.candidates[index]
    if not cand.valid:
        return None
    return round(float(np.linalg.norm(cand.waypoints - expert, axis=1).mean()), 4)


def candidates_planner(planner: CandidatePlanner, choice: str = "scorer",
                       log: CandidateLog | None = None, label: bool = False) -> PlannerFn:
    """A closed-loop planner function over ``planner``'s candidates; ``choice``: whose pick
    is driven (``CHOICES``); ``label``: run the oracle on every frame and log the
    candidates' privileged outcomes and features (training data) even when the scorer
    chooses. Raises ValueError for an unknown choice."""
    if choice not in CHOICES:
        raise ValueError(f"unknown candidate choice {choice!r}; use {' or '.join(CHOICES)}")
    oracle_runs = choice == "oracle" or label

    def plan(observation: SimObservation, image: np.ndarray) -> PlanResult:
        public = public_observation(observation)
        cset = planner.plan_candidates(public)
        outcomes = None
        if oracle_runs:
            outcomes = _oracle(observation, cset)
        chosen = cset.selection.chosen if cset.selection is not None and \
            choice == "scorer" else 0
        if choice == "oracle":
            scores = [o.score if o is not None else -1.0 for o in outcomes]
            chosen = int(np.argmax(scores))               # the first best: greedy on ties
        if log is not None:
            log.add(public, cset, chosen, outcomes, observation.expert_waypoints)
        cand = cset.candidates[chosen]
        if not cand.valid:
            exc = AnswerParseError("planning", cand.text, cand.error)
            exc.stats = cset.stats
            raise exc
        return PlanResult(cand.waypoints, cand.text, cset.stats)
    return plan


def _oracle(observation: SimObservation, cset: CandidateSet) -> list:
    """The privileged outcome of each candidate (None for one that did not parse)."""
    if observation.oracle is None:
        raise ValueError("the candidate oracle runs in the simulator's closed loop only "
                         "(this observation carries none)")
    valid = cset.valid_indices()
    scored = observation.oracle(cset.waypoints()[valid]) if valid else []
    outcomes: list = [None] * len(cset)
    for i, outcome in zip(valid, scored):
        outcomes[i] = outcome
    return outcomes


def checkpoint_candidates(path: str, decode=None, cameras: tuple[str, ...] | None = None, *,
                          candidates, scorer_weights=None, choice: str = "scorer",
                          log: CandidateLog | None = None, label: bool = False) -> PlannerFn:
    """A checkpoint (directory or preset) as a closed-loop candidates planner
    (``Planner`` with ``PlannerConfig(candidates=...)`` under :func:`candidates_planner`);
    ``cameras``: the run's rig, which must be the model's (ValueError, before any
    episode)."""
    from wamdiff2_core.planner import Planner, PlannerConfig  # torch loads here

    planner = Planner.from_pretrained(path, PlannerConfig(
        decode, candidates=candidates, scorer_weights=scorer_weights))
    check_rig(planner.model.fields.cameras, cameras, f"checkpoint {path}")
    return candidates_planner(planner, choice, log, label)
