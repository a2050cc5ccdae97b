"""The expert driver and what it is used for: future waypoints and navigation commands.

The expert is highway-env's IDM (longitudinal) + MOBIL (lane changes) driver with
comfortable acceleration limits and, where the road branches, a route to the scenario's
destination. Its future trajectory is the ground truth for planning; the navigation
command is read off what it does within the planning horizon:

1. ``left``/``right`` when it drives through a junction lane that turns by more than
   ``TURN_ANGLE_DEG``;
2. otherwise ``left``/``right`` when it is changing lanes (its target lane differs from
   the lane it is on and lies more than ``LANE_CHANGE_OFFSET_M`` to one side);
3. otherwise ``straight`` (including following a curved road: a bend is not a command).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from highway_env.road.road import LaneIndex, RoadNetwork
from highway_env.vehicle.behavior import IDMVehicle

from wamdiff2_core.sim.frames import hw_heading_to_yaw, hw_to_map

if TYPE_CHECKING:
    from wamdiff2_core.sim.world import World

TURN_ANGLE_DEG = 30.0
LANE_CHANGE_OFFSET_M = 1.0


class ExpertVehicle(IDMVehicle):
    """IDM + MOBIL with comfortable limits (own class attributes, so that scenarios that
    retune IDMVehicle for background traffic do not change the expert)."""

    ACC_MAX = 6.0
    COMFORT_ACC_MAX = 2.0
    COMFORT_ACC_MIN = -4.0
    DISTANCE_WANTED = 5.0 + IDMVehicle.LENGTH
    TIME_WANTED = 1.5
    POLITENESS = 0.1
    LANE_CHANGE_MIN_ACC_GAIN = 0.3
    LANE_CHANGE_MAX_BRAKING_IMPOSED = 1.5
    LANE_CHANGE_DELAY = 1.0

    def act(self, action: dict | str | None = None) -> None:
        """IDM/MOBIL, except that a yield imposed by the road's priority rules is ignored
        once the expert is inside a junction (stopping there blocks everyone)."""
        if getattr(self, "is_yielding", False) and _in_junction(self.road.network,
                                                                self.lane_index):
            self.target_speed = self.road.network.get_lane(self.lane_index).speed_limit
        super().act(action)

    def step(self, dt: float) -> None:
        """Kinematics as highway-env's, but braking stops at standstill (never reverses)."""
        if self.action.get("acceleration", 0.0) < 0.0:
            self.action["acceleration"] = max(self.action["acceleration"], -self.speed / dt)
        super().step(dt)


def _in_junction(network: RoadNetwork, lane_index: LaneIndex) -> bool:
    """Whether a lane starts at a node with several outgoing roads (a junction lane)."""
    return len(network.graph.get(lane_index[0], {})) > 1


@dataclass
class Trace:
    """One vehicle recorded at every control step (highway-env frame, lane indices)."""

    positions: list[np.ndarray] = field(default_factory=list)
    headings: list[float] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)
    lanes: list[LaneIndex] = field(default_factory=list)
    targets: list[LaneIndex] = field(default_factory=list)
    crashed: list[bool] = field(default_factory=list)

    def record(self, vehicle) -> None:
        self.positions.append(np.array(vehicle.position, dtype=np.float64))
        self.headings.append(float(vehicle.heading))
        self.speeds.append(float(vehicle.speed))
        self.lanes.append(vehicle.lane_index)
        self.targets.append(getattr(vehicle, "target_lane_index", vehicle.lane_index))
        self.crashed.append(bool(vehicle.crashed))

    def __len__(self) -> int:
        return len(self.positions)

    def map_poses(self) -> np.ndarray:
        """(N, 3) x, y, yaw in the map frame."""
        xy = hw_to_map(np.stack(self.positions))
        yaw = np.array([hw_heading_to_yaw(h) for h in self.headings])
        return np.concatenate([xy, yaw[:, None]], axis=1)


@dataclass
class ExpertMemory:
    """The expert's lane decision carried from one rollout to the next (closed loop)."""

    target_lane_index: LaneIndex | None = None
    timer: float | None = None


def route_nodes(network: RoadNetwork, lane_index: LaneIndex,
                destination: str | None) -> tuple[str, ...]:
    """Nodes of the route from ``lane_index`` to ``destination`` (empty when none)."""
    if not destination:
        return ()
    path = network.shortest_path(lane_index[1], destination)
    return (lane_index[0], *path) if path else ()


def rollout(world: World, horizon_s: float, radius: float,
            memory_at_s: float = 0.5) -> Trace:
    """See :meth:`World.expert_rollout`."""
    from wamdiff2_core.sim.world import CONTROL_DT, _ID_ATTR

    road, ego = world.copy_road(radius)
    memory = world.expert_memory
    target = ego.lane_index
    if (memory.target_lane_index is not None
            and memory.target_lane_index[:2] == target[:2]):
        target = memory.target_lane_index
    expert = ExpertVehicle(road, ego.position, ego.heading, ego.speed,
                           target_lane_index=target, target_speed=world.draw.expert_speed,
                           timer=memory.timer)
    if world.draw.destination and ego.lane_index[1] in world.route_nodes:
        expert.plan_route_to(world.draw.destination)
    setattr(expert, _ID_ATTR, getattr(ego, _ID_ATTR))
    road.vehicles[road.vehicles.index(ego)] = expert
    trace = Trace()
    trace.record(expert)
    memory_step = round(memory_at_s / CONTROL_DT)
    for step in range(1, round(horizon_s / CONTROL_DT) + 1):
        road.act()
        road.step(CONTROL_DT)
        trace.record(expert)
        if step == memory_step:
            world.expert_memory = ExpertMemory(expert.target_lane_index, expert.timer)
    return trace


def _turn_direction(network: RoadNetwork, lane_index: LaneIndex) -> str | None:
    """left/right for a junction lane that turns, else None."""
    if not _in_junction(network, lane_index):
        return None
    lane = network.get_lane(lane_index)
    turn = (lane.heading_at(lane.length) - lane.heading_at(0.0) + math.pi) % (
        2 * math.pi) - math.pi
    if abs(turn) < math.radians(TURN_ANGLE_DEG):
        return None
    return "right" if turn > 0 else "left"   # highway-env headings grow clockwise


def derive_command(network: RoadNetwork, trace: Trace, start: int, steps: int) -> str:
    """The navigation command for the expert at ``trace[start]`` given the next ``steps``
    samples (see the module docstring for the rule)."""
    end = min(len(trace), start + steps + 1)
    for k in range(start, end):
        for lane_index in (trace.lanes[k], trace.targets[k]):
            direction = _turn_direction(network, lane_index)
            if direction:
                return direction
    for k in range(start, end):
        lane_index, target = trace.lanes[k], trace.targets[k]
        if target == lane_index or target is None:
            continue
        lane = network.get_lane(target)
        s, r = lane.local_coordinates(trace.positions[k])
        if -5.0 <= s <= lane.length + 5.0 and abs(r) > LANE_CHANGE_OFFSET_M:
            return "left" if r > 0 else "right"   # ego right of its target: move left
    return "straight"
