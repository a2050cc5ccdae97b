"""Closed-loop runner: a planner drives the ego through simulated episodes.

Every ``replan_interval_s`` the runner renders the front camera, builds the observation
(command from the expert's intent, velocity and acceleration in the ego frame) and asks
the planner for 8 waypoints; between plans a pure-pursuit + speed controller follows the
latest plan and sends highway-env continuous actions. Each episode is scored with
:mod:`wamdiff2_core.evaluation.pdms`.

Safe fallback when the planner fails (``AnswerParseError``: unparseable answer; or a
result that is not 8 finite (x, y) pairs): keep following the last valid plan, which is
fixed in the map frame and indexed by time, so it is followed further along as time
passes, while it is younger than ``plan_max_age_s``; otherwise (no valid plan yet, or too
old) brake to a standstill at ``fallback_decel`` m/s^2 along the centre of the current
lane.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from wamdiff2_core.evaluation.pdms import EpisodeLog, EpisodeScore, ScoreConfig, score_episode
from wamdiff2_core.geometry import map_to_ego
from wamdiff2_core.sim.camera import CameraConfig
from wamdiff2_core.sim.controller import ControllerConfig, Plan, TrackingController
from wamdiff2_core.sim.expert import derive_command
from wamdiff2_core.sim.generator import episode_seed
from wamdiff2_core.sim.planners import PlannerFn, SimObservation
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.scenarios import SCENARIOS, get_scenario
from wamdiff2_core.sim.world import CONTROL_DT, World
from wamdiff2_core.tasks import AnswerParseError

FALLBACK_TEXT = ("on a planner failure (unparseable answer or invalid waypoints) the last "
                 "valid plan is followed further along in time while it is younger than "
                 "{age:g} s; without one, the ego brakes to a standstill at {decel:g} m/s^2 "
                 "along the centre of its lane")


@dataclass(frozen=True)
class ClosedLoopConfig:
    episodes: int = 3
    seed: int = 0
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    duration_s: float | None = None          # None: each scenario's own duration
    replan_interval_s: float = 0.5
    plan_max_age_s: float = 3.0
    fallback_decel: float = 3.0
    others_radius_m: float = 60.0
    camera: CameraConfig = field(default_factory=CameraConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    score: ScoreConfig = field(default_factory=ScoreConfig)

    def fallback_text(self) -> str:
        return FALLBACK_TEXT.format(age=self.plan_max_age_s, decel=self.fallback_decel)


@dataclass
class PlannerStats:
    """How the planner fared in one episode (counts of planning instants)."""

    plans: int = 0                 # valid plans
    parse_failures: int = 0        # AnswerParseError
    invalid_plans: int = 0         # not 8 finite (x, y) pairs
    reused_plan_steps: int = 0     # failures covered by the last valid plan
    brake_fallbacks: int = 0       # failures answered by braking in lane
    planner_seconds: float = 0.0


@dataclass
class EpisodeResult:
    index: int
    scenario: str
    seed: int
    log: EpisodeLog
    score: EpisodeScore
    stats: PlannerStats
    expert_path: np.ndarray                  # (T_ref, 2) map frame
    others_tracks: dict[int, np.ndarray]     # id -> (k, 2) map positions
    lanes: list

    def to_json(self) -> dict:
        log = self.log
        collision = None
        if log.collision_step is not None:
            collision = {"time_s": round(log.collision_step * log.dt, 3),
                         "at_fault": log.collision_at_fault}
        return {"index": self.index, "scenario": self.scenario, "seed": self.seed,
                **self.score.to_json(), "collision": collision,
                "offroad_steps": int((~log.on_drivable).sum()),
                "duration_s": round((len(log.ego) - 1) * log.dt, 3),
                "progress_m": round(float(log.progress[-1]), 3),
                "expert_progress_m": round(float(log.expert_progress[
                    min(len(log.ego), len(log.expert_progress)) - 1]), 3),
                **{k: v for k, v in asdict(self.stats).items() if k != "planner_seconds"}}


class ReferencePath:
    """The expert's driven path; projects positions to progress along it."""

    def __init__(self, points: np.ndarray) -> None:
        keep = np.concatenate([[True], np.linalg.norm(np.diff(points, axis=0), axis=1) > 1e-3])
        self.points = points[keep]
        if len(self.points) < 2:   # the expert never moved: a stub pointing nowhere
            self.points = np.vstack([self.points[:1], self.points[:1] + [1e-3, 0.0]])
        self.seg = np.diff(self.points, axis=0)
        self.lengths = np.linalg.norm(self.seg, axis=1)
        self.cumulative = np.concatenate([[0.0], np.cumsum(self.lengths)])

    def project(self, position: np.ndarray, previous: float, max_lateral: float = 8.0,
                back: float = 5.0, ahead: float = 15.0) -> float:
        """Arc length of ``position`` near ``previous`` (monotone search window); the
        previous value when the position is further than ``max_lateral`` from the path."""
        lo = np.searchsorted(self.cumulative, previous - back, side="right") - 1
        hi = np.searchsorted(self.cumulative, previous + ahead, side="right")
        lo, hi = max(lo, 0), min(max(hi, lo + 1), len(self.seg))
        starts, seg, lengths = self.points[lo:hi], self.seg[lo:hi], self.lengths[lo:hi]
        t = np.clip(np.einsum("ij,ij->i", position - starts, seg) / lengths**2, 0.0, 1.0)
        closest = starts + seg * t[:, None]
        dist = np.linalg.norm(closest - position, axis=1)
        i = int(np.argmin(dist))
        if dist[i] > max_lateral:
            return previous
        return float(max(previous, self.cumulative[lo + i] + t[i] * lengths[i]))


def _others_array(world: World, radius: float) -> np.ndarray:
    states = world.others(radius=radius)
    return np.array([[s.x, s.y, s.yaw, s.speed, s.length, s.width] for s in states]
                    ).reshape(-1, 6)


def _collision_at_fault(world: World, speed_before: float, stationary: float = 0.5) -> bool:
    """NAVSIM's rule: not at fault when the ego was standing still, or when every vehicle
    touching it is behind it (it hit us); at fault otherwise."""
    if speed_before < stationary:
        return False
    ego = world.ego_state()
    for other in world.others(radius=12.0):
        rel = map_to_ego(other.xy, ego.xy, ego.yaw)
        if np.hypot(*rel) > (ego.length + other.length) / 2 + 1.0:
            continue
        if not (rel[0] < -ego.length / 2 and abs(rel[1]) < (ego.width + other.width) / 2):
            return True
    return False


def _valid_waypoints(waypoints) -> np.ndarray | None:
    try:
        array = np.asarray(waypoints, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if array.shape != (8, 2) or not np.isfinite(array).all() or np.abs(array).max() > 1000:
        return None
    return array


def expert_reference(scenario: str, seed: int, steps: int) -> np.ndarray:
    """The expert's own positions (T, 2) over ``steps`` control steps from the start."""
    world = World(scenario, seed, ego="expert")
    points = [world.ego_state().xy]
    for _ in range(steps):
        world.step()
        points.append(world.ego_state().xy)
        if world.crashed:
            break
    return np.array(points)


def run_episode(planner: PlannerFn, scenario: str, seed: int, index: int,
                config: ClosedLoopConfig) -> EpisodeResult:
    """Drive one episode with ``planner`` and score it."""
    duration = config.duration_s or get_scenario(scenario).duration_s
    duration = min(duration, get_scenario(scenario).max_time_s - 4.0)
    steps = int(round(duration / CONTROL_DT))
    replan = max(1, int(round(config.replan_interval_s / CONTROL_DT)))
    expert_path = expert_reference(scenario, seed, steps)
    expert_progress = np.concatenate([[0.0], np.cumsum(
        np.linalg.norm(np.diff(expert_path, axis=0), axis=1))])
    reference = ReferencePath(expert_path)
    world = World(scenario, seed, ego="controlled")
    controller = TrackingController(config.controller)
    ego0 = world.ego_state()
    egos = [[ego0.x, ego0.y, ego0.yaw, ego0.speed]]
    others = [_others_array(world, config.others_radius_m)]
    drivable = [world.ego_on_drivable_area()]
    progress = [0.0]
    tracks: dict[int, list] = {}
    stats = PlannerStats()
    collision_step, at_fault = None, False
    renderer = CameraRenderer(config.camera, world.lanes)
    try:
        for step in range(steps):
            if step % replan == 0:
                _replan(world, planner, controller, renderer, config, stats)
            ego = world.ego_state()
            velocity, _ = world.ego_motion()
            motion_yaw = ego.yaw + math.atan2(velocity[1], velocity[0]) if (
                velocity[0] > 0.5) else ego.yaw
            control = controller.control(ego.xy, ego.yaw, ego.speed, motion_yaw, world.time,
                                         CONTROL_DT)
            world.step(control)
            speed_before = ego.speed
            ego = world.ego_state()
            egos.append([ego.x, ego.y, ego.yaw, ego.speed])
            others.append(_others_array(world, config.others_radius_m))
            drivable.append(world.ego_on_drivable_area())
            progress.append(reference.project(ego.xy, progress[-1]))
            for row in world.others(radius=config.camera.far):
                tracks.setdefault(row.id, []).append((row.x, row.y))
            if world.crashed:
                collision_step, at_fault = step + 1, _collision_at_fault(world, speed_before)
                break
    finally:
        renderer.close()
    log = EpisodeLog(dt=CONTROL_DT, nominal_steps=steps, ego=np.array(egos),
                     ego_size=(ego0.length, ego0.width), others=others,
                     on_drivable=np.array(drivable), progress=np.array(progress),
                     expert_progress=expert_progress, collision_step=collision_step,
                     collision_at_fault=at_fault)
    return EpisodeResult(index, scenario, seed, log, score_episode(log, config.score), stats,
                         expert_path, {k: np.array(v) for k, v in sorted(tracks.items())},
                         world.lanes)


def _replan(world: World, planner: PlannerFn, controller: TrackingController,
            renderer: CameraRenderer, config: ClosedLoopConfig, stats: PlannerStats) -> None:
    ego = world.ego_state()
    rollout = world.expert_rollout(horizon_s=4.0)
    poses = rollout.map_poses()[5::5][:8]                        # t = 0.5 ... 4.0 s
    expert_waypoints = map_to_ego(poses[:, :2], ego.xy, ego.yaw)
    image = renderer.render(ego, world.others(radius=config.camera.far + 10.0)).rgb
    velocity, acceleration = world.ego_motion()
    observation = SimObservation(
        images=[image], command=derive_command(world.road.network, rollout, 0, 40),
        velocity=(float(velocity[0]), float(velocity[1])),
        acceleration=(float(acceleration[0]), float(acceleration[1])),
        stamp=world.time, expert_waypoints=expert_waypoints)
    started = time.perf_counter()
    try:
        waypoints = _valid_waypoints(planner(observation, image))
        if waypoints is None:
            stats.invalid_plans += 1
    except AnswerParseError:
        waypoints = None
        stats.parse_failures += 1
    stats.planner_seconds += time.perf_counter() - started
    if waypoints is not None:
        stats.plans += 1
        controller.set_plan(Plan.from_waypoints(waypoints, ego.xy, ego.yaw, world.time))
        return
    plan = controller.plan
    if plan is not None and world.time - plan.start_time < config.plan_max_age_s:
        stats.reused_plan_steps += 1
        return
    stats.brake_fallbacks += 1
    controller.set_plan(Plan.from_waypoints(world.lane_brake_waypoints(config.fallback_decel),
                                            ego.xy, ego.yaw, world.time))


def run_closed_loop(planner: PlannerFn, config: ClosedLoopConfig, progress: bool = True
                    ) -> list[EpisodeResult]:
    """Episodes ``0 .. episodes-1``: scenario ``scenarios[i % n]``, world seed from
    ``(seed, i)`` (the same seeds as the data generator's)."""
    from tqdm import tqdm

    results = []
    for index in tqdm(range(config.episodes), desc="eval closed-loop", unit="episode",
                      disable=not progress, dynamic_ncols=True):
        scenario = config.scenarios[index % len(config.scenarios)]
        results.append(run_episode(planner, scenario, episode_seed(config.seed, index), index,
                                   config))
    return results
