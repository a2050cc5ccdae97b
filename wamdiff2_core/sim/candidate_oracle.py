"""The privileged score of candidate plans: what each would earn if the ego followed it.

Only the closed loop uses it, to report the best of a planner's K candidates (the ceiling a
run-time scorer can reach) and to label training data for a learned scorer
(``wamdiff2_core.sim.candidate_data``); a planner never sees it.

Each candidate (8 waypoints, ego frame) is followed for ``horizon_s`` seconds in a copy of
the world near the ego, with the closed loop's own controller, while the other vehicles
drive on (they react to the ego's copy, as in the episode). The rollout is scored with the
terms of :mod:`wamdiff2_core.evaluation.pdms` over one window: NC (no collision with the ego
moving), DAC (the footprint stays on the road, checked every ``drivable_every`` steps), EP
(progress along the expert's own 4 s plan from the same instant, against the expert's),
TTC and comfort (the rollout appended to the last second the ego drove, so that a plan that
jerks away from the current motion pays for it). Like NAVSIM's PDM score of a proposal, and
like it privileged: it reads the world.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wamdiff2_core.evaluation.pdms import (ScoreConfig, comfort_ok, pdms, struck_at_fault,
                                           ttc_violation)
from wamdiff2_core.geometry import ego_to_map
from wamdiff2_core.sim.controller import ControllerConfig, Plan, TrackingController
from wamdiff2_core.sim.world import CONTROL_DT, World

TERMS = ("nc", "dac", "ep", "ttc", "comfort")


@dataclass(frozen=True)
class OracleConfig:
    horizon_s: float = 4.0
    radius_m: float = 80.0             # other vehicles kept in the world's copy
    drivable_every: int = 5            # control steps between drivable-area checks
    history_s: float = 1.0             # driven past the comfort terms see before the plan
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    score: ScoreConfig = field(default_factory=ScoreConfig)


@dataclass(frozen=True)
class CandidateOutcome:
    """The privileged terms of one candidate and their PDM score, all in [0, 1]."""

    nc: float
    dac: float
    ep: float
    ttc: float
    comfort: float

    @property
    def score(self) -> float:
        return pdms(self.nc, self.dac, self.ep, self.ttc, self.comfort)

    def to_json(self) -> dict:
        return {**{k: round(float(getattr(self, k)), 6) for k in TERMS},
                "score": round(self.score, 6)}


def _progress(points: np.ndarray, position: np.ndarray) -> float:
    """Arc length along the polyline ``points`` (N, 2) of its point closest to
    ``position``."""
    seg = np.diff(points, axis=0)
    lengths = np.linalg.norm(seg, axis=1)
    keep = lengths > 1e-6
    if not keep.any():
        return 0.0
    starts, seg, lengths = points[:-1][keep], seg[keep], lengths[keep]
    t = np.clip(np.einsum("ij,ij->i", position - starts, seg) / lengths**2, 0.0, 1.0)
    dist = np.linalg.norm(starts + seg * t[:, None] - position, axis=1)
    i = int(np.argmin(dist))
    return float(np.concatenate([[0.0], np.cumsum(lengths)])[i] + t[i] * lengths[i])


def _at_fault(ego, others, stationary: float) -> bool:
    """NAVSIM's rule (as the closed loop's): not at fault standing still or hit from
    behind."""
    state = World.agent_state(ego)
    return state.speed >= stationary and struck_at_fault(state, others)


def rollout_outcome(world: World, waypoints: np.ndarray, expert_waypoints: np.ndarray,
                    config: OracleConfig = OracleConfig()) -> CandidateOutcome:
    """The privileged outcome of following ``waypoints`` (8, 2), ego frame at the world's
    current time, for ``config.horizon_s`` seconds (the world itself is not changed)."""
    start = world.ego_state()
    road, ego = world.copy_road(config.radius_m)
    controller = TrackingController(config.controller)
    controller.set_plan(Plan.from_waypoints(waypoints, start.xy, start.yaw, 0.0))
    ranges = world.env.action_type
    acc_lo, acc_hi = ranges.acceleration_range
    st_lo, st_hi = ranges.steering_range
    history = [s for t, s in world.ego_history if t >= world.time - config.history_s - 1e-9]
    states = [[s.x, s.y, s.yaw, s.speed] for s in history]
    score_from = len(states) - 1
    steps = int(round(config.horizon_s / CONTROL_DT))
    dac, ttc, nc = 1.0, 1.0, 1.0
    for step in range(1, steps + 1):
        now = World.agent_state(ego)
        accel, steer = controller.control(now.xy, now.yaw, now.speed, (step - 1) * CONTROL_DT,
                                          CONTROL_DT)
        # highway-env's steering turns right (its y axis points down): as World.step
        ego.act({"acceleration": float(np.clip(accel, acc_lo, acc_hi)),
                 "steering": float(np.clip(-steer, st_lo, st_hi))})
        road.act()
        road.step(CONTROL_DT)
        state = World.agent_state(ego)
        states.append([state.x, state.y, state.yaw, state.speed])
        others = [World.agent_state(v) for v in road.vehicles if v is not ego]
        if ego.crashed:
            if _at_fault(ego, others, config.score.stationary_speed):
                nc = 0.0
            break
        if (step % config.drivable_every == 0 or step == steps) and dac and not \
                world.on_drivable_area(state.corners()).all():
            dac = 0.0
        near = np.array([[o.x, o.y, o.yaw, o.speed, o.length, o.width] for o in others
                         if np.hypot(o.x - state.x, o.y - state.y) < 40.0]).reshape(-1, 6)
        if ttc and ttc_violation(np.array(states[-1]), (state.length, state.width), near,
                                 config.score):
            ttc = 0.0
    ego_path = np.array(states)
    comfort = float(comfort_ok(ego_path, CONTROL_DT, config.score)[score_from:].all())
    expert = np.vstack([start.xy, ego_to_map(np.asarray(expert_waypoints, np.float64),
                                             start.xy, start.yaw)])
    expert_len = float(np.linalg.norm(np.diff(expert, axis=0), axis=1).sum())
    if expert_len < config.score.min_expert_progress_m:
        ep = 1.0
    else:
        ep = float(np.clip(_progress(expert, ego_path[-1, :2]) / expert_len, 0.0, 1.0))
    return CandidateOutcome(nc, dac, ep, ttc, comfort)


def oracle_outcomes(world: World, candidates: np.ndarray, expert_waypoints: np.ndarray,
                    config: OracleConfig = OracleConfig()) -> list[CandidateOutcome]:
    """The privileged outcome of each candidate of ``candidates`` (K, 8, 2)."""
    return [rollout_outcome(world, c, expert_waypoints, config)
            for c in np.asarray(candidates, np.float64)]


def frame_oracle(world: World, expert_waypoints: np.ndarray,
                 config: OracleConfig = OracleConfig()):
    """The oracle of the world's current instant: candidates (K, 8, 2) -> their outcomes.
    Called later, when the world has moved on, it raises instead of scoring another
    instant (a planner answering after its frame: the oracle needs ``--time sync``)."""
    stamp = world.time

    def score(candidates: np.ndarray) -> list[CandidateOutcome]:
        if world.time != stamp:
            raise RuntimeError(f"the candidate oracle scores the world at its frame's instant "
                               f"({stamp:g} s), and it is now {world.time:g} s: it needs a "
                               f"planner answering at once (--time sync)")
        return oracle_outcomes(world, candidates, expert_waypoints, config)
    return score
