"""Planners for the closed loop: ``(observation, image) -> waypoints (8, 2)``.

A planner is any callable taking a :class:`SimObservation` (an ``Observation`` plus the
privileged expert plan; its images: one per camera of the run's rig) and the current image
of the rig's first camera (H, W, 3) uint8, and
returning 8 waypoints in the ego frame (x forward, y left, 0.5 s apart), or a
``PlanResult`` holding them (its decode statistics are what ``--time latency-model``
prices). It may raise ``AnswerParseError``; the runner counts that and falls back safely.

Registered planners (``--planner``):

- ``expert``: the privileged IDM/MOBIL expert (reads ``observation.expert_waypoints``,
  which the runner fills from a rollout of the expert in a copy of the world); the
  reference the score is calibrated on.
- ``constant-velocity``: keep the current speed and heading (a baseline).
- ``checkpoint:DIR`` (or ``checkpoint:PRESET``): a trained model through
  ``Planner.from_pretrained(DIR).plan(...)``; it sees only the image, command, velocity
  and acceleration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from wamdiff2_core.types import Observation

PlannerFn = Callable[["SimObservation", np.ndarray], np.ndarray]


@dataclass
class SimObservation(Observation):
    """What a planner is given at one planning instant (ego frame: x forward, y left; images
    [(H, W, 3) uint8]; ``stamp``: simulation time in seconds)."""

    expert_waypoints: np.ndarray | None = None           # privileged: expert planner only
    # privileged: candidates (K, 8, 2) -> their outcomes (sim.candidate_oracle); read only
    # by the closed loop's oracle choice, never handed to a planner
    oracle: Callable[[np.ndarray], list] | None = None


def expert_planner() -> PlannerFn:
    def plan(observation: SimObservation, image: np.ndarray) -> np.ndarray:
        if observation.expert_waypoints is None:
            raise ValueError("the expert planner needs observation.expert_waypoints")
        return np.asarray(observation.expert_waypoints, dtype=np.float64)
    return plan


def constant_velocity_planner() -> PlannerFn:
    def plan(observation: SimObservation, image: np.ndarray) -> np.ndarray:
        speed = max(float(observation.velocity[0]), 0.0)
        times = np.arange(1, 9) * 0.5
        return np.stack([speed * times, np.zeros(8)], axis=1)
    return plan


def checkpoint_planner(path: str, decode=None,
                       cameras: tuple[str, ...] | None = None) -> PlannerFn:
    """A trained model (checkpoint directory or preset name) as a closed-loop planner;
    ``decode``: a ``DecodeConfig`` (default: none chosen, so the checkpoint's recommended
    commit rule; ``decoding.config.resolve_decode``). ``cameras``: the run's rig, which
    must be the cameras the model was trained with (ValueError, before any episode)."""
    from wamdiff2_core.planner import Planner, PlannerConfig  # torch loads here

    model = Planner.from_pretrained(path, PlannerConfig(decode))
    check_rig(model.model.fields.cameras, cameras, f"checkpoint {path}")

    def plan(observation: SimObservation, image: np.ndarray):
        return model.plan(observation)      # a PlanResult: waypoints and the decode's stats
    return plan


PLANNERS: dict[str, Callable[..., PlannerFn]] = {
    "expert": expert_planner,
    "constant-velocity": constant_velocity_planner,
    "checkpoint": checkpoint_planner,
}


def check_rig(trained: tuple[str, ...], rig: tuple[str, ...] | None, what: str) -> None:
    """ValueError (one sentence) unless ``rig`` (None: not stated) is ``trained``, the
    cameras a model was trained with, in order."""
    if rig is not None and tuple(rig) != tuple(trained):
        raise ValueError(f"{what} was trained with the cameras {', '.join(trained)} but the "
                         f"rig has {', '.join(rig)}: pass the rig it was trained with "
                         f"(--cameras {','.join(trained)} or its rig file)")


def make_planner(spec: str, decode=None, cameras: tuple[str, ...] | None = None) -> PlannerFn:
    """``"expert"``, ``"constant-velocity"`` or ``"checkpoint:DIR"`` -> a planner. ``decode``
    (a ``DecodeConfig``) sets how a checkpoint planner decodes; ``cameras``: the run's rig
    (a checkpoint planner refuses one its model was not trained with)."""
    name, _, argument = spec.partition(":")
    if name not in PLANNERS:
        raise ValueError(f"unknown planner {spec!r}; use expert, constant-velocity or "
                         "checkpoint:DIR")
    if name == "checkpoint":
        if not argument:
            raise ValueError("checkpoint planner needs a directory: checkpoint:DIR")
        return PLANNERS[name](argument, decode, cameras)
    if decode is not None:
        raise ValueError(f"decoding options apply to checkpoint planners, not {name!r}")
    if argument:
        raise ValueError(f"planner {name!r} takes no argument")
    return PLANNERS[name]()
