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

import numpy as np
from highway_env.road.road import LaneIndex, RoadNetwork
from highway_env.vehicle.behavior import IDMVehicle

from wamdiff2_core.geometry import box_corners, boxes_overlap
from wamdiff2_core.sim.frames import hw_heading_to_yaw, hw_to_map

TURN_ANGLE_DEG = 30.0
GAP_BOX = (1.5 * IDMVehicle.LENGTH, 1.2 * IDMVehicle.WIDTH)   # footprint inflated for gaps
LANE_CHANGE_OFFSET_M = 1.0


class ExpertVehicle(IDMVehicle):
    """IDM + MOBIL with comfortable limits (own class attributes, so that scenarios that
    retune IDMVehicle for background traffic do not change the expert), plus three habits
    of a careful driver that plain IDM lacks:

    - it slows down before bends, to keep lateral acceleration under ``LATERAL_ACC``;
    - it crosses junctions at no more than ``JUNCTION_SPEED``, and enters one only when
      its path through it stays clear of every other vehicle's constant-speed prediction
      (gap acceptance, ``GAP_DISTANCE_M`` / ``GAP_MARGIN_S``), else it stops at the entry;
    - a yield imposed by the road's priority rules is a stop at the junction's entry (with
      the deceleration that takes, at least ``YIELD_DECEL``), not highway-env's full-force
      stop wherever the car happens to be, and it is ignored once inside the junction
      (stopping there blocks everyone);
    - braking stops at a standstill (never reverses).
    """

    ACC_MAX = 6.0
    COMFORT_ACC_MAX = 2.0
    COMFORT_ACC_MIN = -4.0
    DISTANCE_WANTED = 5.0 + IDMVehicle.LENGTH
    TIME_WANTED = 1.5
    POLITENESS = 0.1
    LANE_CHANGE_MIN_ACC_GAIN = 0.3
    LANE_CHANGE_MAX_BRAKING_IMPOSED = 1.5
    LANE_CHANGE_DELAY = 1.0
    LATERAL_ACC = 2.5           # [m/s^2] cornering speed sqrt(LATERAL_ACC * radius)
    ANTICIPATION_DECEL = 1.5    # [m/s^2] slowing down before a bend
    YIELD_DECEL = 1.0           # [m/s^2] the least braking of a yield
    JUNCTION_SPEED = 6.0        # [m/s]
    APPROACH_M = 30.0           # gap acceptance starts this far before a junction
    GAP_DISTANCE_M = 5.0        # centres further apart than this + a length: no overlap
    GAP_MARGIN_S = 1.5          # the gap must stay open this long after we have crossed
    CONFLICT_HORIZON_S = 3.0    # inside a junction, brake for vehicles that would meet us
    LOOKAHEAD_M = 60.0

    def __init__(self, *args, cruise_speed: float | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cruise_speed = float(cruise_speed if cruise_speed is not None else self.speed)

    def _route_nodes(self) -> tuple[str, ...]:
        if not self.route:
            return ()
        return (self.route[0][0], *(index[1] for index in self.route))

    def cornering_speed(self) -> float:
        """The cruise speed, lowered for the bends within LOOKAHEAD_M metres."""
        network = self.road.network
        s_here = network.get_lane(self.target_lane_index).local_coordinates(self.position)[0]
        speed = self.cruise_speed
        for index, start in lane_chain(network, self.target_lane_index, self._route_nodes(),
                                       self.LOOKAHEAD_M + s_here):
            radius = getattr(network.get_lane(index), "radius", None)
            limit = math.sqrt(self.LATERAL_ACC * radius) if radius else math.inf
            if _in_junction(network, index):
                limit = min(limit, self.JUNCTION_SPEED)
            if limit < speed:
                distance = max(0.0, start - s_here)
                speed = min(speed, math.sqrt(limit**2 + 2 * self.ANTICIPATION_DECEL * distance))
        return speed

    def junction_blocked(self) -> bool:
        """Whether the junction ahead (within APPROACH_M) is not free to enter now."""
        network = self.road.network
        if _in_junction(network, self.lane_index):
            return False
        lane = network.get_lane(self.lane_index)
        s_here = lane.local_coordinates(self.position)[0]
        if lane.length - s_here > self.APPROACH_M:
            return False
        chain = lane_chain(network, self.lane_index, self._route_nodes(), lane.length + 60.0)
        crossing = [(index, start) for index, start in chain[1:] if _in_junction(network, index)]
        if not crossing:
            return False
        index, start = crossing[0]
        to_clear = start + network.get_lane(index).length + self.LENGTH - s_here
        speed = max(self.speed, 4.0)
        times = np.arange(0.0, to_clear / speed + self.GAP_MARGIN_S, 0.25)
        mine = [chain_pose(network, chain, s_here + speed * t) for t in times]
        for other in self.road.vehicles:
            if (other is self or other.lane_index == self.lane_index
                    or np.linalg.norm(other.position - self.position) > 80.0
                    or _giving_way(network, other)):
                continue
            if hasattr(other, "predict_trajectory_constant_speed"):
                theirs = zip(*other.predict_trajectory_constant_speed(times))
            else:
                theirs = ((other.position + other.velocity * t, other.heading) for t in times)
            for (p_me, h_me), (p_other, h_other) in zip(mine, theirs):
                if np.linalg.norm(p_me - p_other) > self.GAP_DISTANCE_M + self.LENGTH:
                    continue
                if boxes_overlap(box_corners(p_me, h_me, *GAP_BOX),
                                 box_corners(p_other, h_other, *GAP_BOX)):
                    return True
        return False

    def conflict_deceleration(self) -> float:
        """Inside a junction: the braking [m/s^2, positive; 0 when none] that stops the car
        short of the first place where another vehicle inside the junction, ahead of it on
        a crossing or merging lane and moving on at constant speed, would meet its path
        within CONFLICT_HORIZON_S (vehicles still outside must let us clear the junction)."""
        network = self.road.network
        if not _in_junction(network, self.lane_index) or self.speed <= 0.0:
            return 0.0
        lane = network.get_lane(self.lane_index)
        s_here = lane.local_coordinates(self.position)[0]
        chain = lane_chain(network, self.lane_index, self._route_nodes(), lane.length + 40.0)
        speed = max(self.speed, 2.0)
        times = np.arange(0.25, self.CONFLICT_HORIZON_S + 1e-9, 0.25)
        mine = [chain_pose(network, chain, s_here + speed * t) for t in times]
        heading = np.array([np.cos(self.heading), np.sin(self.heading)])
        mine_lanes = {index for index, _ in chain}
        needed = 0.0
        for other in self.road.vehicles:
            offset = other.position - self.position
            if (other is self or other.lane_index in mine_lanes   # followed by IDM
                    or not _in_junction(network, other.lane_index)  # it must let us clear
                    or np.linalg.norm(offset) > 40.0 or offset @ heading <= 0.0
                    or _giving_way(network, other)):
                continue
            if hasattr(other, "predict_trajectory_constant_speed"):
                theirs = zip(*other.predict_trajectory_constant_speed(times))
            else:
                theirs = ((other.position + other.velocity * t, other.heading) for t in times)
            for t, (p_me, h_me), (p_other, h_other) in zip(times, mine, theirs):
                if boxes_overlap(box_corners(p_me, h_me, *GAP_BOX),
                                 box_corners(p_other, h_other, *GAP_BOX)):
                    gap = max(speed * t - GAP_BOX[0] / 2, 0.5)
                    needed = max(needed, self.speed**2 / (2.0 * gap))
                    break
        return float(min(needed, self.ACC_MAX))

    def _yield_deceleration(self) -> float:
        """Braking [m/s^2, positive] that stops the car at the end of its lane."""
        lane = self.road.network.get_lane(self.lane_index)
        distance = lane.length - lane.local_coordinates(self.position)[0] - self.LENGTH / 2
        needed = self.speed**2 / (2.0 * max(distance, 0.5))
        return float(np.clip(needed, self.YIELD_DECEL, self.ACC_MAX))

    def act(self, action: dict | str | None = None) -> None:
        if getattr(self, "is_yielding", False) and _in_junction(self.road.network,
                                                                self.lane_index):
            self.is_yielding = False
        super().act(action)

    def acceleration(self, ego_vehicle, front_vehicle=None, rear_vehicle=None) -> float:
        if ego_vehicle is not self:
            return super().acceleration(ego_vehicle, front_vehicle, rear_vehicle)
        yielding = getattr(self, "is_yielding", False) or self.junction_blocked()
        self.target_speed = self.cornering_speed()
        accel = super().acceleration(self, front_vehicle, rear_vehicle)
        if yielding:
            accel = min(accel, -self._yield_deceleration() if self.speed > 0.0 else 0.0)
        conflict = self.conflict_deceleration()
        if conflict > 0.0:
            accel = min(accel, -conflict)
        return accel

    def step(self, dt: float) -> None:
        if self.action.get("acceleration", 0.0) < 0.0:
            self.action["acceleration"] = max(self.action["acceleration"], -self.speed / dt)
        super().step(dt)


def _giving_way(network: RoadNetwork, vehicle) -> bool:
    """A vehicle that is yielding (the road's priority rules stopped it), or standing
    outside a junction (waiting at its entry): not about to cross anyone's path."""
    if getattr(vehicle, "is_yielding", False):
        return True
    return vehicle.speed < 0.5 and not _in_junction(network, vehicle.lane_index)


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

    def hold(self) -> None:
        """Repeat the last state, standing still."""
        for name in ("positions", "headings", "lanes", "targets"):
            values = getattr(self, name)
            values.append(values[-1])
        self.speeds.append(0.0)
        self.crashed.append(True)

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


def lane_chain(network: RoadNetwork, lane_index: LaneIndex, route_nodes: tuple[str, ...],
               length: float, max_lanes: int = 8) -> list[tuple[LaneIndex, float]]:
    """The lanes followed from ``lane_index`` for at least ``length`` metres, each with the
    arc length at which it starts: single continuations are taken, junctions are crossed
    along ``route_nodes`` (the chain stops at a junction off the route), and a road that
    turns back (a U-turn) ends the chain."""
    chain = [(lane_index, 0.0)]
    travelled = network.get_lane(lane_index).length
    while travelled < length and len(chain) < max_lanes:
        current = chain[-1][0]
        node = current[1]
        outs = network.graph.get(node, {})
        if len(outs) == 1:
            nxt = next(iter(outs))
        elif node in route_nodes and route_nodes.index(node) + 1 < len(route_nodes):
            nxt = route_nodes[route_nodes.index(node) + 1]
        else:
            break
        lanes = outs.get(nxt)
        if not lanes:
            break
        index = (node, nxt, min(current[2], len(lanes) - 1))
        here, there = network.get_lane(current), network.get_lane(index)
        turn = (there.heading_at(0.0) - here.heading_at(here.length) + math.pi) % (
            2 * math.pi) - math.pi
        if abs(turn) > math.pi / 2:
            break
        chain.append((index, travelled))
        travelled += there.length
    return chain


def settled_lane_index(network: RoadNetwork, lane_index: LaneIndex,
                       position: np.ndarray) -> LaneIndex:
    """``lane_index``, or, when ``position`` lies before that lane's start (highway-env's
    closest lane can be the junction lane just ahead of a car still waiting at the
    entry), the incoming lane that actually holds the position."""
    if network.get_lane(lane_index).local_coordinates(position)[0] >= 0.0:
        return lane_index
    best, best_r = lane_index, math.inf
    for start, ends in network.graph.items():
        for index, lane in enumerate(ends.get(lane_index[0], [])):
            s, r = lane.local_coordinates(position)
            if 0.0 <= s <= lane.length + 1.0 and abs(r) < min(best_r, lane.width_at(s)):
                best, best_r = (start, lane_index[0], index), abs(r)
    return best


def chain_pose(network: RoadNetwork, chain: list[tuple[LaneIndex, float]],
               s: float) -> tuple[np.ndarray, float]:
    """The highway-env position and heading at arc length ``s`` along a lane chain
    (extrapolated past its last lane)."""
    index, start = chain[0]
    for candidate, candidate_start in chain:
        if candidate_start <= s:
            index, start = candidate, candidate_start
    lane = network.get_lane(index)
    return lane.position(s - start, 0.0), lane.heading_at(s - start)


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
