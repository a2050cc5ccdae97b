"""Simulator camera frames for the ROS tests: the project's Panda3D front camera on a
highway-env road (wamdiff2_core.sim), rendered once per size and reused."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from wamdiff2_core.sim.camera import CameraConfig
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.world import World


@dataclass(frozen=True)
class SimFrame:
    rgb: np.ndarray                      # (H, W, 3) uint8, front camera
    velocity: tuple[float, float]        # ego frame, m/s


@functools.lru_cache(maxsize=4)
def sim_frames(count: int = 20, width: int = 640, height: int = 360,
               seed: int = 0) -> tuple[SimFrame, ...]:
    """`count` consecutive front-camera frames (10 Hz) of a highway episode."""
    world = World("highway", seed=seed)
    frames = []
    with CameraRenderer(CameraConfig(width=width, height=height), world.lanes) as renderer:
        for _ in range(count):
            rgb = renderer.render(world.ego_state(), world.others(150.0)).rgb
            velocity, _ = world.ego_motion()
            frames.append(SimFrame(rgb, (float(velocity[0]), float(velocity[1]))))
            world.step()
    return tuple(frames)
