"""Scenario families: highway-env environments with road geometry and traffic drawn by seed.

A scenario turns ``(seed)`` into a highway-env configuration plus the expert's cruising
speed and, where the road branches, a destination. Everything random comes from
``numpy.random.default_rng(seed)`` here and from highway-env's own generator, which
``World`` seeds with the same seed, so a seed names one episode on every machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from highway_env.envs.common.abstract import AbstractEnv
from highway_env.envs.highway_env import HighwayEnv
from highway_env.envs.intersection_env import IntersectionEnv
from highway_env.envs.racetrack_env import RacetrackEnv


@dataclass(frozen=True)
class ScenarioDraw:
    """What one seed decides for one scenario family."""

    env_config: dict            # highway-env config overrides
    expert_speed: float         # the expert's cruising (IDM desired) speed [m/s]
    destination: str | None     # route end node where the road branches, else None
    ego_speed: float            # ego's speed at t = 0 [m/s]


@dataclass(frozen=True)
class Scenario:
    """A family of episodes sharing one kind of road geometry."""

    name: str
    env_class: type[AbstractEnv]
    draw: Callable[[np.random.Generator], ScenarioDraw]
    duration_s: float                              # default closed-loop episode length
    description: str
    max_time_s: float = 600.0                      # the road runs out (or loops back) later
    warmup_s: float = 0.0                          # driven by the expert before t = 0
    spawn_every_s: float | None = None             # intersection: traffic keeps arriving


def _common(extra: dict) -> dict:
    config = {
        "observation": {"type": "Kinematics"},
        "action": {"type": "ContinuousAction", "longitudinal": True, "lateral": True,
                   "dynamical": False, "acceleration_range": [-6.0, 6.0],
                   "steering_range": [-np.pi / 4, np.pi / 4]},
        "simulation_frequency": 10,
        "policy_frequency": 10,
        "offscreen_rendering": True,
    }
    config.update(extra)
    return config


def _draw_highway(rng: np.random.Generator) -> ScenarioDraw:
    lanes = int(rng.integers(2, 5))
    speed = float(rng.uniform(22.0, 28.0))
    return ScenarioDraw(
        env_config=_common({
            "lanes_count": lanes,
            "vehicles_count": int(rng.integers(8, 8 + 5 * lanes)),
            "vehicles_density": float(rng.uniform(0.8, 1.4)),
            "initial_lane_id": int(rng.integers(0, lanes)),
            "ego_spacing": 2,
        }),
        expert_speed=speed, destination=None, ego_speed=speed)


def _draw_intersection(rng: np.random.Generator) -> ScenarioDraw:
    destination = f"o{int(rng.integers(1, 4))}"   # o1: left, o2: straight, o3: right
    return ScenarioDraw(
        env_config=_common({
            "destination": destination,
            "initial_vehicle_count": int(rng.integers(4, 10)),
            "spawn_probability": float(rng.uniform(0.3, 0.6)),
        }),
        expert_speed=9.0, destination=destination, ego_speed=9.0)


def _draw_racetrack(rng: np.random.Generator) -> ScenarioDraw:
    speed = float(rng.uniform(7.0, 9.0))
    return ScenarioDraw(
        env_config=_common({"other_vehicles": int(rng.integers(2, 6)),
                            "terminate_off_road": False}),
        expert_speed=speed, destination=None, ego_speed=speed)


SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario for scenario in (
        Scenario("highway", HighwayEnv, _draw_highway, duration_s=20.0,
                 description="straight multi-lane motorway (2-4 lanes), dense IDM/MOBIL "
                             "traffic, lane changes",
                 # highway-env drops the ego into traffic at cruise speed, sometimes right
                 # behind a slower car: let the expert settle that before time starts
                 warmup_s=3.0),
        Scenario("intersection", IntersectionEnv, _draw_intersection, duration_s=12.0,
                 description="four-way junction with priority rules; the route turns left, "
                             "goes straight or turns right",
                 # past ~17 s the ego reaches the end of the exit road, where highway-env's
                 # network continues with a U-turn into the opposite lane
                 max_time_s=16.0, spawn_every_s=1.0),
        Scenario("racetrack", RacetrackEnv, _draw_racetrack, duration_s=20.0,
                 description="two-lane closed circuit with tight left and right bends"),
    )
}


def get_scenario(name: str) -> Scenario:
    """The scenario registered under ``name``; ValueError names the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def parse_scenarios(text: str | None) -> tuple[str, ...]:
    """``"highway,racetrack"`` -> validated names; None or "all" -> every scenario."""
    if not text or text == "all":
        return tuple(SCENARIOS)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        get_scenario(name)
    return names
