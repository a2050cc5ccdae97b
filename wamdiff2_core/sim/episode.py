"""One data-generation episode: drive the expert, capture frames, build ground truth.

Frames are taken every ``frame_interval_s`` after ``warmup_s``; the world is simulated
``HORIZON_S`` past the last frame so that every frame has the expert's 8 future waypoints.
A frame is kept only if the expert did not crash before the end of its horizon and the
horizon ends within the scenario's time limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wamdiff2_core.geometry import map_to_ego, wrap_angle
from wamdiff2_core.sim.camera import CameraConfig
from wamdiff2_core.sim.detection import DetectionConfig, GroundTruthBox, boxes_from_ids
from wamdiff2_core.sim.expert import derive_command
from wamdiff2_core.sim.qa import QaItem, qa_item
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.world import CONTROL_DT, AgentState, World

NUM_WAYPOINTS = 8
WAYPOINT_DT_S = 0.5
HORIZON_S = NUM_WAYPOINTS * WAYPOINT_DT_S
OTHERS_RADIUS_M = 100.0


@dataclass(frozen=True)
class EpisodeConfig:
    """How frames are taken from one episode."""

    frames: int = 20
    frame_interval_s: float = 0.5
    warmup_s: float = 1.0
    camera: CameraConfig = field(default_factory=CameraConfig)
    detection: DetectionConfig = field(default_factory=DetectionConfig)

    def __post_init__(self) -> None:
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
    image: np.ndarray                  # (H, W, 3) uint8
    ego: AgentState
    velocity: np.ndarray               # (2,) ego frame
    acceleration: np.ndarray           # (2,) ego frame
    boxes: list[GroundTruthBox]
    qa: QaItem
    others: list[AgentState]
    command: str = "straight"
    ego_future: np.ndarray | None = None        # (8, 2) ego frame
    others_future: list[dict] = field(default_factory=list)


def _snapshot(world: World) -> dict[int, tuple[float, float, float, float, float]]:
    return {s.id: (s.x, s.y, s.yaw, s.length, s.width) for s in world.others()}


def run_episode(scenario: str, seed: int, episode: int, config: EpisodeConfig
                ) -> tuple[World, list[Capture]]:
    """Simulate one expert episode and return its frames with complete ground truth."""
    world = World(scenario, seed, ego="expert")
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
    try:
        for step in range(last + 1):
            if step > 0:
                world.step()
                if world.crashed:
                    break
            if step % wp_step == 0:
                snapshots[step] = _snapshot(world)
                ego = world.ego_state()
                ego_poses[step] = (ego.x, ego.y, ego.yaw)
            if step in frame_steps:
                captures.append(_capture(world, renderer, config, seed, episode,
                                         frame_steps.index(step), step))
    finally:
        renderer.close()
    complete = [c for c in captures if c.step + horizon in ego_poses]
    for capture in complete:
        _fill_future(world, capture, snapshots, ego_poses, wp_step, horizon)
    return world, complete


def _capture(world: World, renderer: CameraRenderer, config: EpisodeConfig, seed: int,
             episode: int, frame: int, step: int) -> Capture:
    ego = world.ego_state()
    visible = world.others(radius=config.camera.far + 10.0)
    rendered = renderer.render(ego, visible)
    velocity, acceleration = world.ego_motion()
    rng = np.random.default_rng([seed, episode, frame])
    return Capture(frame=frame, step=step, image=rendered.rgb, ego=ego, velocity=velocity,
                   acceleration=acceleration,
                   boxes=boxes_from_ids(rendered.ids, config.detection),
                   qa=qa_item(world, rng), others=world.others(radius=OTHERS_RADIUS_M))


def _fill_future(world: World, capture: Capture, snapshots: dict, ego_poses: dict,
                 wp_step: int, horizon: int) -> None:
    ego = capture.ego
    future_steps = [capture.step + wp_step * k for k in range(1, NUM_WAYPOINTS + 1)]
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
