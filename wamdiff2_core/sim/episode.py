"""One data-generation episode: drive the expert, capture frames, build ground truth.

Frames are taken every ``frame_interval_s`` after ``warmup_s``; the world is simulated
``HORIZON_S`` past the last frame so that every frame has the expert's 8 future waypoints.
A frame is kept only if the expert did not crash before the end of its horizon and the
horizon ends within the scenario's time limit.

Two ways to drive (``EpisodeConfig.drive``):

- ``expert``: the expert drives; a frame's waypoints are where it then went.
- ``perturbed``: recovery data (DART-style noise injection). A tracking controller drives
  the ego along the expert's plan, replanned every ``frame_interval_s`` from a rollout of
  the expert in a copy of the world; with probability ``perturb_p`` the followed plan is
  pushed sideways by an offset drawn from N(0, ``perturb_m``) (clipped to 2 ``perturb_m``,
  reached after ``PERTURB_RAMP_S``). The car wanders off the lane centre and off the
  heading of the lane, and each frame's waypoints are the *clean* rollout from where it is:
  the way back that the expert's own data never shows. The prompt's velocity and
  acceleration are the car's as driven.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wamdiff2_core.geometry import map_to_ego, wrap_angle
from wamdiff2_core.sim.camera import CameraRig, as_rig
from wamdiff2_core.sim.controller import Plan, TrackingController
from wamdiff2_core.sim.detection import DetectionConfig, GroundTruthBox, boxes_from_ids
from wamdiff2_core.sim.expert import derive_command
from wamdiff2_core.sim.qa import QaItem, qa_item
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.world import CONTROL_DT, AgentState, World

NUM_WAYPOINTS = 8
WAYPOINT_DT_S = 0.5
HORIZON_S = NUM_WAYPOINTS * WAYPOINT_DT_S
OTHERS_RADIUS_M = 100.0
DRIVES = ("expert", "perturbed")
PERTURB_RAMP_S = 1.0


@dataclass(frozen=True)
class EpisodeConfig:
    """How frames are taken from one episode."""

    frames: int = 20
    frame_interval_s: float = 0.5
    warmup_s: float = 1.0
    camera: CameraRig = field(default_factory=CameraRig)   # a CameraConfig: a rig of one
    detection: DetectionConfig = field(default_factory=DetectionConfig)
    drive: str = "expert"              # expert | perturbed (module docstring)
    perturb_m: float = 0.75            # perturbed: std of the lateral offset [m]
    perturb_p: float = 0.5             # perturbed: probability that a plan is pushed

    def __post_init__(self) -> None:
        object.__setattr__(self, "camera", as_rig(self.camera))
        if self.drive not in DRIVES:
            raise ValueError(f"drive must be one of {DRIVES}, got {self.drive!r}")
        if not (0.0 < self.perturb_m <= 3.0):
            raise ValueError(f"perturb_m must be in (0, 3] m, got {self.perturb_m}")
        if not (0.0 <= self.perturb_p <= 1.0):
            raise ValueError(f"perturb_p must be in [0, 1], got {self.perturb_p}")
        for name in ("frame_interval_s", "warmup_s"):
            steps = getattr(self, name) / CONTROL_DT
            if abs(steps - round(steps)) > 1e-9:
                raise ValueError(f"{name} must be a multiple of {CONTROL_DT} s")
        if self.frames < 1:
            raise ValueError("frames must be at least 1")


@dataclass
class Capture:
    """Everything known at one frame's instant (the future is filled in afterwards)."""

    frame: int
    step: int
    images: tuple[np.ndarray, ...]     # (H, W, 3) uint8 per camera of the rig, in its order
    ego: AgentState
    velocity: np.ndarray               # (2,) ego frame
    acceleration: np.ndarray           # (2,) ego frame
    boxes: list[GroundTruthBox]
    qa: QaItem
    others: list[AgentState]
    command: str = "straight"
    ego_future: np.ndarray | None = None        # (8, 2) ego frame
    others_future: list[dict] = field(default_factory=list)

    @property
    def image(self) -> np.ndarray:
        """The first camera's image (the one detection boxes are drawn on)."""
        return self.images[0]


def _snapshot(world: World) -> dict[int, tuple[float, float, float, float, float]]:
    return {s.id: (s.x, s.y, s.yaw, s.length, s.width) for s in world.others()}


def run_episode(scenario: str, seed: int, episode: int, config: EpisodeConfig
                ) -> tuple[World, list[Capture]]:
    """Simulate one episode (driven as ``config.drive`` says) and return its frames with
    complete ground truth."""
    perturbed = config.drive == "perturbed"
    world = World(scenario, seed, ego="controlled" if perturbed else "expert")
    interval = round(config.frame_interval_s / CONTROL_DT)
    warmup = round(config.warmup_s / CONTROL_DT)
    horizon = round(HORIZON_S / CONTROL_DT)
    wp_step = round(WAYPOINT_DT_S / CONTROL_DT)
    limit = round(world.scenario.max_time_s / CONTROL_DT)
    frame_steps = [warmup + k * interval for k in range(config.frames)]
    frame_steps = [s for s in frame_steps if s + horizon <= limit]
    last = frame_steps[-1] + horizon if frame_steps else 0
    captures: list[Capture] = []
    snapshots: dict[int, dict] = {}
    ego_poses: dict[int, tuple[float, float, float]] = {}
    renderer = CameraRenderer(config.camera, world.lanes)
    driver = _PerturbedDriver(world, config, seed, episode) if perturbed else None
    try:
        for step in range(last + 1):
            if step > 0:
                world.step(driver.control() if driver else None)
                if world.crashed:
                    break
            if step % wp_step == 0:
                snapshots[step] = _snapshot(world)
                ego = world.ego_state()
                ego_poses[step] = (ego.x, ego.y, ego.yaw)
            if driver and (step % interval == 0 or step in frame_steps):
                driver.replan()
            if step in frame_steps:
                capture = _capture(world, renderer, config, seed, episode,
                                   frame_steps.index(step), step)
                if driver:
                    capture.ego_future, capture.command = driver.waypoints, driver.command
                captures.append(capture)
    finally:
        renderer.close()
    complete = [c for c in captures if c.step + horizon in ego_poses]
    for capture in complete:
        _fill_future(world, capture, snapshots, ego_poses, wp_step, horizon)
    return world, complete


class _PerturbedDriver:
    """The ``perturbed`` drive: follows the expert's replanned rollout, pushed sideways."""

    def __init__(self, world: World, config: EpisodeConfig, seed: int, episode: int) -> None:
        self.world, self.config = world, config
        self.controller = TrackingController()
        self.rng = np.random.default_rng([seed, episode, 0x5EED])
        self.waypoints: np.ndarray | None = None     # (8, 2) clean rollout, ego frame
        self.command = "straight"

    def replan(self) -> None:
        world, config = self.world, self.config
        ego = world.ego_state()
        self.waypoints, self.command = world.expert_plan(NUM_WAYPOINTS, WAYPOINT_DT_S)
        followed = self.waypoints.copy()
        if self.rng.random() < config.perturb_p:
            offset = float(np.clip(self.rng.normal(0.0, config.perturb_m),
                                   -2 * config.perturb_m, 2 * config.perturb_m))
            times = np.arange(1, NUM_WAYPOINTS + 1) * WAYPOINT_DT_S
            followed[:, 1] += offset * np.minimum(times / PERTURB_RAMP_S, 1.0)
        self.controller.set_plan(Plan.from_waypoints(followed, ego.xy, ego.yaw, world.time))

    def control(self) -> tuple[float, float]:
        return self.controller.control_world(self.world, CONTROL_DT)


def _capture(world: World, renderer: CameraRenderer, config: EpisodeConfig, seed: int,
             episode: int, frame: int, step: int) -> Capture:
    ego = world.ego_state()
    visible = world.others(radius=config.camera.far + 10.0)
    rendered = renderer.render_rig(ego, visible)
    velocity, acceleration = world.ego_motion()
    rng = np.random.default_rng([seed, episode, frame])
    return Capture(frame=frame, step=step, images=tuple(f.rgb for f in rendered), ego=ego,
                   velocity=velocity, acceleration=acceleration,
                   boxes=boxes_from_ids(rendered[0].ids, config.detection),
                   qa=qa_item(world, rng), others=world.others(radius=OTHERS_RADIUS_M))


def _fill_future(world: World, capture: Capture, snapshots: dict, ego_poses: dict,
                 wp_step: int, horizon: int) -> None:
    """The expert's future (unless a perturbed drive already set the clean rollout's) and
    the other vehicles' futures as they happened."""
    ego = capture.ego
    future_steps = [capture.step + wp_step * k for k in range(1, NUM_WAYPOINTS + 1)]
    if capture.ego_future is None:
        xy = np.array([ego_poses[s][:2] for s in future_steps])
        capture.ego_future = map_to_ego(xy, ego.xy, ego.yaw)
        capture.command = derive_command(world.road.network, world.ego_trace, capture.step,
                                         horizon)
    others = []
    for agent in capture.others:
        if not all(agent.id in snapshots[s] for s in future_steps):
            continue   # left the simulation (far away) within the horizon
        poses = np.array([snapshots[s][agent.id][:3] for s in future_steps])   # (8, 3)
        local = map_to_ego(poses[:, :2], ego.xy, ego.yaw)
        heading = wrap_angle(poses[:, 2] - ego.yaw)
        others.append({"id": agent.id, "size": [agent.length, agent.width],
                       "poses": np.concatenate([local, heading[:, None]], axis=1)})
    capture.others_future = others
