"""World, frames and expert: real highway-env episodes, no mocks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wamdiff2_core.geometry import ego_to_map, map_to_ego, wrap_angle
from wamdiff2_core.sim.expert import derive_command
from wamdiff2_core.sim.scenarios import SCENARIOS, parse_scenarios
from wamdiff2_core.sim.world import CONTROL_DT, World


def _middle_lane_highway() -> World:
    """The first highway seed whose ego starts settled in a lane with a lane on each side."""
    for seed in range(100):
        world = World("highway", seed)
        ego = world.ego
        lanes = world.road.network.all_side_lanes(ego.lane_index)
        if (0 < ego.lane_index[2] < len(lanes) - 1 and abs(ego.heading) < 1e-3
                and ego.target_lane_index == ego.lane_index):
            return world
    raise AssertionError("no highway seed with a middle lane in 100 tries")


def test_map_ego_round_trip_and_axes():
    ego_xy, yaw = np.array([10.0, -3.0]), math.radians(30.0)
    ahead = ego_to_map(np.array([[5.0, 0.0]]), ego_xy, yaw)[0]
    left = ego_to_map(np.array([[0.0, 2.0]]), ego_xy, yaw)[0]
    assert np.allclose(ahead - ego_xy, 5.0 * np.array([math.cos(yaw), math.sin(yaw)]))
    assert np.allclose(left - ego_xy, 2.0 * np.array([-math.sin(yaw), math.cos(yaw)]))
    points = np.random.default_rng(0).normal(size=(20, 2)) * 30
    assert np.allclose(map_to_ego(ego_to_map(points, ego_xy, yaw), ego_xy, yaw), points)


@pytest.mark.parametrize("side, sign", [("left", +1.0), ("right", -1.0)])
def test_lane_change_sign_in_the_ego_frame(side, sign):
    """A lane change to the left ends at y > 0 in the ego frame (y left) and is
    commanded 'left' (and mirrored for the right): highway-env's y axis points down."""
    world = _middle_lane_highway()
    ego = world.ego
    ego.enable_lane_change = False
    start = world.ego_state()
    offset = -1 if side == "left" else +1   # highway-env numbers lanes from the left
    ego.target_lane_index = (*ego.lane_index[:2], ego.lane_index[2] + offset)
    for _ in range(40):
        world.step()
    end = map_to_ego(world.ego_state().xy, start.xy, start.yaw)
    assert end[0] > 20.0
    assert sign * end[1] > 3.0, end
    assert derive_command(world.road.network, world.ego_trace, 0, 40) == side


def test_same_seed_same_trajectory():
    a, b = World("racetrack", 7), World("racetrack", 7)
    for _ in range(30):
        a.step()
        b.step()
    assert [s for _, s in a.ego_history] == [s for _, s in b.ego_history]
    assert a.others() == b.others()
    c = World("racetrack", 8)
    assert c.ego_state() != a.ego_history[0][1]


def test_three_scenario_families_have_different_geometry():
    kinds = {}
    for name in SCENARIOS:
        world = World(name, 1)
        kinds[name] = sorted({type(v._lane).__name__ for v in world.lanes})
        assert world.ego_on_drivable_area()
    assert kinds["highway"] == ["StraightLane"]
    assert "CircularLane" in kinds["racetrack"] and "CircularLane" in kinds["intersection"]
    assert parse_scenarios("all") == tuple(SCENARIOS)
    with pytest.raises(ValueError, match="unknown scenario"):
        parse_scenarios("highway,moon")


def test_intersection_turn_commands_follow_the_route():
    commands = {}
    for seed in range(12):
        world = World("intersection", seed)
        for _ in range(60):
            world.step()
        trace = world.ego_trace
        seen = {derive_command(world.road.network, trace, k, 40) for k in range(0, 20, 5)}
        commands.setdefault(world.draw.destination, set()).update(seen)
    # o1 is a left turn, o2 straight on, o3 a right turn for an ego entering from o0
    assert {"o1", "o3"} <= set(commands), commands
    assert "left" in commands["o1"] and "right" not in commands["o1"]
    assert "right" in commands["o3"] and "left" not in commands["o3"]
    assert commands.get("o2", {"straight"}) == {"straight"}


def test_ego_motion_is_in_the_ego_frame():
    world = World("highway", 3)
    for _ in range(5):
        world.step()
    velocity, acceleration = world.ego_motion()
    assert velocity[0] == pytest.approx(world.ego.speed, abs=0.5)
    assert abs(velocity[1]) < 1.0 and np.isfinite(acceleration).all()


def test_controlled_ego_follows_a_steering_command_left():
    world = World("highway", 3, ego="controlled")
    start = world.ego_state()
    for _ in range(10):
        world.step((0.0, 0.05))   # positive steering turns left
    state = world.ego_state()
    assert wrap_angle(state.yaw - start.yaw) > 0.02
    assert map_to_ego(state.xy, start.xy, start.yaw)[1] > 0.0
    with pytest.raises(ValueError):
        world.step(None)
    assert world.time == pytest.approx(10 * CONTROL_DT)


@pytest.mark.parametrize("scenario", ["racetrack", "intersection"])
def test_expert_plan_is_where_the_expert_then_drives(scenario):
    """World.expert_plan (the closed loop's expert waypoints and command, and the perturbed
    drive's labels): eight ego-frame points 0.5 s apart that the expert-driven ego then
    passes through, and the command of the same rollout."""
    world = World(scenario, 5)
    for _ in range(10):
        world.step()
    start = world.ego_state()
    waypoints, command = world.expert_plan()
    assert waypoints.shape == (8, 2)
    driven = []
    for step in range(1, 41):
        world.step()
        if step % 5 == 0:
            driven.append(map_to_ego(world.ego_state().xy, start.xy, start.yaw))
    assert np.abs(np.array(driven) - waypoints).max() < 0.5, (driven, waypoints)
    assert command == derive_command(world.road.network, world.ego_trace, 10, 40)
    short, _ = world.expert_plan(waypoints=4, waypoint_dt=0.25)
    assert short.shape == (4, 2) and 0.0 < short[0, 0] < waypoints[0, 0]
