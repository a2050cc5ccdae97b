"""Closed-loop runner: a planner drives the ego through simulated episodes.

Every ``replan_interval_s`` (the camera period) the runner renders the cameras of its rig
(the front camera alone by default; one image per camera, in the rig's order), builds the
observation (command from the expert's intent, velocity and acceleration in the
ego frame) and hands the frame to a plan source (:mod:`~wamdiff2_core.sim.plan_sources`:
a planner function in this process, or the ROS node); the time mode
(:mod:`~wamdiff2_core.sim.schedules`) decides when, in simulated time, each plan arrives.
At every 10 Hz control step a pure-pursuit + speed controller follows the newest plan,
placed by its frame's stamp (:mod:`~wamdiff2_core.sim.plan_follower`, which also holds the
fallback rule for frames without a plan), and sends highway-env continuous actions. Each
episode is scored with :mod:`wamdiff2_core.evaluation.pdms`; one whose planner can no
longer answer (``PlannerUnavailable``) ends there as a failure with the reason, scored 0.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from wamdiff2_core.evaluation.closed_loop_report import distribution
from wamdiff2_core.evaluation.pdms import (EpisodeLog, EpisodeScore, ScoreConfig, score_episode,
                                           struck_at_fault)
from wamdiff2_core.geometry import wrap_angle
from wamdiff2_core.sim.camera import CameraRig, as_rig
from wamdiff2_core.sim.candidate_oracle import frame_oracle
from wamdiff2_core.sim.controller import ControllerConfig, TrackingController
from wamdiff2_core.sim.generator import episode_seed
from wamdiff2_core.sim.latency import parse_latency_model
from wamdiff2_core.sim.plan_follower import FALLBACK_TEXT, PlanFollower, PlannerStats
from wamdiff2_core.sim.plan_sources import (CameraFrame, EgoTick, InProcessSource,
                                            PlannerUnavailable, PlanSource)
from wamdiff2_core.sim.planners import PlannerFn, SimObservation
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.scenarios import SCENARIOS, get_scenario
from wamdiff2_core.sim.schedules import TIME_MODES, Schedule
from wamdiff2_core.sim.world import CONTROL_DT, World


@dataclass(frozen=True)
class ClosedLoopConfig:
    episodes: int = 3
    seed: int = 0
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    duration_s: float | None = None          # None: each scenario's own duration
    replan_interval_s: float = 0.5           # the camera period: one frame, one plan request
    plan_max_age_s: float = 3.0
    fallback_decel: float = 3.0
    others_radius_m: float = 60.0
    time_mode: str = "sync"                  # sync | latency-model | realtime (schedules.py)
    latency: str = "zero"                    # the latency model of time_mode latency-model
    answer_timeout_s: float = 10.0           # realtime: simulated seconds with no answer
    warm_start: bool = True                  # the world waits for each episode's first plan
    camera: CameraRig = field(default_factory=CameraRig)   # a CameraConfig: a rig of one
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    score: ScoreConfig = field(default_factory=ScoreConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "camera", as_rig(self.camera))
        if self.time_mode not in TIME_MODES:
            raise ValueError(f"unknown time mode {self.time_mode!r}; use "
                             f"{' | '.join(TIME_MODES)}")
        if self.time_mode != "latency-model" and self.latency != "zero":
            raise ValueError(f"a latency model ({self.latency}) applies to time mode "
                             f"latency-model, not {self.time_mode}")
        parse_latency_model(self.latency)            # ValueError with the reason
        steps = self.replan_interval_s / CONTROL_DT
        if self.replan_interval_s <= 0 or abs(steps - round(steps)) > 1e-6:
            raise ValueError(f"the camera period ({self.replan_interval_s:g} s) must be a "
                             f"whole number of {CONTROL_DT:g} s control steps")
        if self.answer_timeout_s <= 0:
            raise ValueError("the answer timeout must be positive")

    def fallback_text(self) -> str:
        return FALLBACK_TEXT.format(age=self.plan_max_age_s, decel=self.fallback_decel)

    def schedule(self, source: PlanSource) -> Schedule:
        """This configuration's time mode for ``source`` (ValueError if it cannot run it)."""
        return TIME_MODES[self.time_mode](source, parse_latency_model(self.latency),
                                          self.answer_timeout_s, self.warm_start)


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
    failure: str | None = None               # why the planner stopped answering, if it did

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
                "failure": self.failure, **self.planner_json()}

    def planner_json(self) -> dict:
        """The planner's counts, latency and plan ages (deterministic unless the world ran
        in real time)."""
        stats = self.stats
        counts = {k: v for k, v in asdict(stats).items()
                  if k not in stats.SERIES}
        seconds = max((len(self.log.ego) - 1) * self.log.dt, self.log.dt)
        return {**counts, "plans_per_s": round(stats.plans / seconds, 3),
                "latency_ms": distribution(stats.latencies_s, scale=1e3),
                "plan_age_s": distribution(stats.plan_ages_s)}


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
    return speed_before >= stationary and struck_at_fault(world.ego_state(),
                                                          world.others(radius=12.0))


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


def run_episode(source: PlanSource, scenario: str, seed: int, index: int,
                config: ClosedLoopConfig) -> EpisodeResult:
    """Drive one episode with plans from ``source`` in ``config.time_mode`` and score it."""
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
    schedule = config.schedule(source)
    follower = PlanFollower(controller, config.plan_max_age_s, config.fallback_decel,
                            waits=config.time_mode == "sync")
    ego0 = world.ego_state()
    egos = [[ego0.x, ego0.y, ego0.yaw, ego0.speed]]
    others = [_others_array(world, config.others_radius_m)]
    drivable = [world.ego_on_drivable_area()]
    progress = [0.0]
    tracks: dict[int, list] = {}
    collision_step, at_fault, failure = None, False, None
    renderer = CameraRenderer(config.camera, world.lanes)
    try:
        source.begin_episode(index, scenario, seed)
        schedule.begin()
        for step in range(steps):
            now = world.time
            arrived = schedule.arrivals(now)       # plans started earlier see older odometry
            source.tick(_ego_tick(world))
            if step % replan == 0:
                frame = capture_frame(world, renderer, config)
                follower.frame_captured(frame.stamp, frame.ego_xy, frame.ego_yaw)
                schedule.frame(frame)
            follower.apply(arrived + schedule.arrivals(now), world)
            follower.check(world)
            speed_before = world.ego_state().speed
            world.step(controller.control_world(world, CONTROL_DT))
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
            schedule.wait(now, world.time)
    except PlannerUnavailable as exc:
        failure = str(exc)
    finally:
        schedule.end()
        renderer.close()
        source.end_episode(failure)
    follower.close_period()
    stats = follower.stats
    stats.dropped_frames = schedule.dropped_frames
    log = EpisodeLog(dt=CONTROL_DT, nominal_steps=steps, ego=np.array(egos),
                     ego_size=(ego0.length, ego0.width), others=others,
                     on_drivable=np.array(drivable), progress=np.array(progress),
                     expert_progress=expert_progress, collision_step=collision_step,
                     collision_at_fault=at_fault)
    score = score_episode(log, config.score) if failure is None else EpisodeScore(0.0, ())
    return EpisodeResult(index, scenario, seed, log, score, stats, expert_path,
                         {k: np.array(v) for k, v in sorted(tracks.items())}, world.lanes,
                         failure)


def _ego_tick(world: World) -> EgoTick:
    """The ego's odometry now: map pose, ego-frame velocity, yaw rate."""
    ego = world.ego_state()
    velocity, _ = world.ego_motion()
    yaw_rate = 0.0
    if len(world.ego_history) > 1:
        (t0, before), (t1, _) = world.ego_history[-2], world.ego_history[-1]
        yaw_rate = wrap_angle(ego.yaw - before.yaw) / max(t1 - t0, 1e-6)
    return EgoTick(world.time, ego.xy, ego.yaw, velocity, yaw_rate)


def capture_frame(world: World, renderer: CameraRenderer, config: ClosedLoopConfig
                  ) -> CameraFrame:
    """The rig's images now (the first camera's is the frame's ``image``), with the command
    (from a rollout of the expert), velocity, acceleration and the expert's own waypoints
    (for the privileged expert planner)."""
    ego = world.ego_state()
    expert_waypoints, command = world.expert_plan()              # t = 0.5 ... 4.0 s
    frames = renderer.render_rig(ego, world.others(radius=config.camera.far + 10.0))
    images = [frame.rgb for frame in frames]
    image = images[0]
    velocity, acceleration = world.ego_motion()
    observation = SimObservation(
        images=images, command=command,
        velocity=(float(velocity[0]), float(velocity[1])),
        acceleration=(float(acceleration[0]), float(acceleration[1])),
        stamp=world.time, expert_waypoints=expert_waypoints,
        oracle=frame_oracle(world, expert_waypoints))
    return CameraFrame(world.time, image, observation, ego.xy, ego.yaw)


def run_closed_loop(planner: PlannerFn | PlanSource, config: ClosedLoopConfig,
                    progress: bool = True) -> list[EpisodeResult]:
    """Episodes ``0 .. episodes-1``: scenario ``scenarios[i % n]``, world seed from
    ``(seed, i)`` (the same seeds as the data generator's), whatever the plan source and
    time mode, so runs compare episode for episode. ``planner``: a planner function (run
    in this process) or a plan source."""
    from tqdm import tqdm

    owned = callable(planner)
    source = InProcessSource(planner) if owned else planner
    try:
        config.schedule(source)             # a time mode this source cannot run: fail now
        results = []
        for index in tqdm(range(config.episodes), desc="eval closed-loop", unit="episode",
                          disable=not progress, dynamic_ncols=True):
            scenario = config.scenarios[index % len(config.scenarios)]
            results.append(run_episode(source, scenario, episode_seed(config.seed, index),
                                       index, config))
        return results
    finally:
        if owned:
            source.close()
