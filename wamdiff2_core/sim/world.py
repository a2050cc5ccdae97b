"""The simulated world: a highway-env road with traffic, one ego vehicle, ground truth.

``World`` owns a highway-env environment but drives it itself (``road.act(); road.step``)
at a fixed 10 Hz control rate instead of calling ``env.step``: the environments' rewards
and observations are not needed and cost more than the simulation. The ego is either

- ``"expert"``: an :class:`~wamdiff2_core.sim.expert.ExpertVehicle` (IDM + MOBIL, with a
  route) that drives itself, used to generate data and as the closed-loop reference; or
- ``"controlled"``: a plain kinematic vehicle driven through highway-env's
  ``ContinuousAction`` (acceleration, steering), used by the closed-loop runner.

Everything handed out is in the map frame (see ``frames.py``). Vehicles get stable integer
ids (ego: 0) in order of appearance.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
from highway_env.vehicle.behavior import IDMVehicle
from highway_env.vehicle.kinematics import Vehicle

from wamdiff2_core.geometry import box_corners, map_to_ego, vector_map_to_ego
from wamdiff2_core.sim import expert as expert_mod
from wamdiff2_core.sim.frames import hw_heading_to_yaw, hw_to_map, map_to_hw
from wamdiff2_core.sim.scenarios import Scenario, ScenarioDraw, get_scenario

CONTROL_DT = 0.1          # [s] one World.step
EGO_MODES = ("expert", "controlled")
_ID_ATTR = "wamdiff2_id"
# IntersectionEnv rewrites these IDMVehicle class attributes for the whole process; they are
# restored before every reset so that one scenario never changes another's traffic.
_IDM_CLASS_DEFAULTS = {name: getattr(IDMVehicle, name) for name in (
    "DISTANCE_WANTED", "COMFORT_ACC_MAX", "COMFORT_ACC_MIN")}


@dataclass(frozen=True)
class AgentState:
    """One vehicle at one instant, map frame."""

    id: int
    x: float
    y: float
    yaw: float        # [rad], CCW from map +x
    speed: float      # [m/s]
    length: float
    width: float

    @property
    def xy(self) -> np.ndarray:
        return np.array([self.x, self.y])

    def corners(self) -> np.ndarray:
        """Footprint corners (4, 2), map frame."""
        return box_corners(self.xy, self.yaw, self.length, self.width)


class World:
    """One episode of one scenario, reproducible from ``(scenario, seed, ego)``."""

    def __init__(self, scenario: str, seed: int, ego: str = "expert") -> None:
        if ego not in EGO_MODES:
            raise ValueError(f"ego must be one of {EGO_MODES}, got {ego!r}")
        for name, value in _IDM_CLASS_DEFAULTS.items():
            setattr(IDMVehicle, name, value)
        self.scenario: Scenario = get_scenario(scenario)
        self.seed = int(seed)
        self.ego_mode = ego
        self.draw: ScenarioDraw = self.scenario.draw(np.random.default_rng(self.seed))
        self.env = self.scenario.env_class(config=self.draw.env_config)
        self.env.reset(seed=self.seed)
        self.road = self.env.road
        self.time = 0.0
        self._steps = 0
        self._next_id = 0
        self.ego = self._install_ego(self.env.vehicle)
        self._assign_ids()
        for _ in range(round(self.scenario.warmup_s / CONTROL_DT)):
            self._advance()
        if ego == "controlled":
            self.ego = self._install_controlled(self.ego)
        self.route_nodes = expert_mod.route_nodes(self.road.network, self.ego.lane_index,
                                                  self.draw.destination)
        self.expert_memory = expert_mod.ExpertMemory()
        self.ego_history: list[tuple[float, AgentState]] = [(0.0, self.ego_state())]
        self.ego_trace = expert_mod.Trace()
        self.ego_trace.record(self.ego)
        self._lanes: list[LaneView] | None = None

    @property
    def lanes(self) -> list[LaneView]:
        """Every lane of the road (map frame), built once."""
        if self._lanes is None:
            self._lanes = lane_views(self.road.network)
        return self._lanes

    # ----------------------------------------------------------------------------- set-up
    def _install_ego(self, original: Vehicle) -> Vehicle:
        """The expert replaces highway-env's ego (it also drives any warm-up)."""
        # start no faster than a close slower vehicle ahead (no emergency braking at t = 0)
        speed = self.draw.ego_speed
        front, _ = self.road.neighbour_vehicles(original, original.lane_index)
        if front is not None and original.lane_distance_to(front) < 120.0:
            speed = min(speed, max(front.speed + 2.0, 0.0))
        ego = expert_mod.ExpertVehicle(self.road, original.position, original.heading, speed,
                                       cruise_speed=self.draw.expert_speed)
        if self.draw.destination:
            ego.plan_route_to(self.draw.destination)
        self._replace(original, ego)
        setattr(ego, _ID_ATTR, self._take_id())
        return ego

    def _install_controlled(self, expert: Vehicle) -> Vehicle:
        """A plain kinematic vehicle, driven by actions, in the expert's place and state."""
        ego = Vehicle(self.road, expert.position, expert.heading, expert.speed)
        self._replace(expert, ego)
        setattr(ego, _ID_ATTR, getattr(expert, _ID_ATTR))
        return ego

    def _replace(self, old: Vehicle, new: Vehicle) -> None:
        self.road.vehicles[self.road.vehicles.index(old)] = new
        self.env.controlled_vehicles = [new]
        self.env.action_type.controlled_vehicle = new

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _assign_ids(self) -> None:
        for vehicle in self.road.vehicles:
            if not hasattr(vehicle, _ID_ATTR):
                setattr(vehicle, _ID_ATTR, self._take_id())

    # ----------------------------------------------------------------------------- stepping
    def step(self, control: tuple[float, float] | None = None) -> None:
        """Advance CONTROL_DT seconds.

        ``control`` is (acceleration [m/s^2], steering [rad], positive turns left) for a
        controlled ego, sent as highway-env's normalised continuous action (whose steering
        turns right: its y axis points down); it must be None for an expert ego.
        """
        if (control is None) != (self.ego_mode == "expert"):
            raise ValueError("a controlled ego needs a control; an expert ego takes none")
        if control is not None:
            action_type = self.env.action_type
            acc_lo, acc_hi = action_type.acceleration_range
            st_lo, st_hi = action_type.steering_range
            action = np.array([
                2.0 * (control[0] - acc_lo) / (acc_hi - acc_lo) - 1.0,
                2.0 * (-control[1] - st_lo) / (st_hi - st_lo) - 1.0])
            action_type.act(np.clip(action, -1.0, 1.0))
        self._advance()
        self.time = round(self._steps * CONTROL_DT - self.scenario.warmup_s, 6)
        self.ego_history.append((self.time, self.ego_state()))
        self.ego_trace.record(self.ego)

    def _advance(self) -> None:
        self.road.act()
        self.road.step(CONTROL_DT)
        self._steps += 1
        spawn = self.scenario.spawn_every_s
        if spawn and self._steps % round(spawn / CONTROL_DT) == 0:
            self.env._clear_vehicles()   # highway-env's own traffic renewal (IntersectionEnv)
            self.env._spawn_vehicle(spawn_probability=self.env.config["spawn_probability"])
        self._assign_ids()

    # ----------------------------------------------------------------------------- state
    @staticmethod
    def agent_state(vehicle: Vehicle) -> AgentState:
        x, y = hw_to_map(vehicle.position)
        return AgentState(id=int(getattr(vehicle, _ID_ATTR, -1)), x=float(x), y=float(y),
                          yaw=hw_heading_to_yaw(vehicle.heading), speed=float(vehicle.speed),
                          length=float(vehicle.LENGTH), width=float(vehicle.WIDTH))

    def ego_state(self) -> AgentState:
        return self.agent_state(self.ego)

    def others(self, radius: float | None = None) -> list[AgentState]:
        """Every vehicle but the ego (within ``radius`` metres of it when given), by id."""
        states = [self.agent_state(v) for v in self.road.vehicles if v is not self.ego]
        if radius is not None:
            ego = self.ego_state()
            states = [s for s in states if np.hypot(s.x - ego.x, s.y - ego.y) <= radius]
        return sorted(states, key=lambda s: s.id)

    @property
    def crashed(self) -> bool:
        return bool(self.ego.crashed)

    def ego_motion(self) -> tuple[np.ndarray, np.ndarray]:
        """Velocity and acceleration (2,) each in the ego frame, by backward differences."""
        states = [s for _, s in self.ego_history[-3:]]
        now = states[-1]
        if len(states) < 2:
            return np.array([now.speed, 0.0]), np.zeros(2)
        xy = np.stack([s.xy for s in states])                       # (k, 2)
        vel = np.diff(xy, axis=0) / CONTROL_DT                      # (k-1, 2)
        acc = (vel[-1] - vel[-2]) / CONTROL_DT if len(vel) > 1 else np.zeros(2)
        return vector_map_to_ego(vel[-1], now.yaw), vector_map_to_ego(acc, now.yaw)

    def on_drivable_area(self, points: np.ndarray, tolerance: float = 0.3) -> np.ndarray:
        """Bool (N,): whether each map point lies on some lane (+ ``tolerance`` metres)."""
        points_hw = map_to_hw(np.atleast_2d(points))
        inside = np.zeros(len(points_hw), dtype=bool)
        for lane in self.road.network.lanes_list():
            for i, point in enumerate(points_hw):
                if inside[i]:
                    continue
                s, r = lane.local_coordinates(point)
                inside[i] = (-tolerance <= s <= lane.length + tolerance
                             and abs(r) <= lane.width_at(s) / 2 + tolerance)
        return inside

    def ego_on_drivable_area(self) -> bool:
        return bool(self.on_drivable_area(self.ego_state().corners()).all())

    def lane_brake_waypoints(self, decel: float) -> np.ndarray:
        """Eight waypoints (8, 2), ego frame, 0.5 s apart: braking at ``decel`` m/s^2 to a
        standstill along the centre of the ego's current lane."""
        lane = self.road.network.get_lane(self.ego.lane_index)
        s0, _ = lane.local_coordinates(self.ego.position)
        speed = max(float(self.ego.speed), 0.0)
        times = np.minimum(np.arange(1, 9) * 0.5, speed / decel)
        along = speed * times - 0.5 * decel * times**2
        points = hw_to_map(np.stack([lane.position(s0 + d, 0.0) for d in along]))
        ego = self.ego_state()
        return map_to_ego(points, ego.xy, ego.yaw)

    # ----------------------------------------------------------------------------- expert
    def expert_rollout(self, horizon_s: float = 4.0, radius: float = 150.0,
                       memory_at_s: float = 0.5) -> expert_mod.Trace:
        """What the expert would do from here: a copy of the world within ``radius`` of the
        ego, the ego replaced by the expert, simulated ``horizon_s`` seconds.

        The trace starts with the current state (index 0) and has one entry per CONTROL_DT.
        The world itself is not changed, except for the expert's memory of its lane
        decision (as it stands ``memory_at_s`` into the rollout), which keeps consecutive
        rollouts consistent.
        """
        road, ego = self.copy_road(radius)
        memory = self.expert_memory
        target = expert_mod.settled_lane_index(road.network, ego.lane_index, ego.position)
        if (memory.target_lane_index is not None
                and memory.target_lane_index[:2] == target[:2]):
            target = memory.target_lane_index
        expert = expert_mod.ExpertVehicle(road, ego.position, ego.heading, ego.speed,
                                          target_lane_index=target, timer=memory.timer,
                                          cruise_speed=self.draw.expert_speed)
        if self.draw.destination and ego.lane_index[1] in self.route_nodes:
            expert.plan_route_to(self.draw.destination)
        setattr(expert, _ID_ATTR, getattr(ego, _ID_ATTR))
        road.vehicles[road.vehicles.index(ego)] = expert
        trace = expert_mod.Trace()
        trace.record(expert)
        memory_step = round(memory_at_s / CONTROL_DT)
        for step in range(1, round(horizon_s / CONTROL_DT) + 1):
            road.act()
            road.step(CONTROL_DT)
            if expert.crashed:
                # hit in the prediction (typically by a car in a pile-up of others): the plan
                # is to stand still, not to follow the crash physics
                trace.hold()
                continue
            trace.record(expert)
            if step == memory_step:
                self.expert_memory = expert_mod.ExpertMemory(expert.target_lane_index,
                                                             expert.timer)
        return trace

    def expert_plan(self, waypoints: int = 8, waypoint_dt: float = 0.5
                    ) -> tuple[np.ndarray, str]:
        """The expert's plan from here, as a planner states it: ``waypoints`` positions
        (waypoints, 2), ego frame, ``waypoint_dt`` apart, and the driving command derived
        from the same rollout (:func:`expert.derive_command`). One :meth:`expert_rollout`
        of ``waypoints * waypoint_dt`` seconds (it updates the expert's lane memory)."""
        horizon_s = waypoints * waypoint_dt
        rollout = self.expert_rollout(horizon_s=horizon_s)
        step = round(waypoint_dt / CONTROL_DT)
        poses = rollout.map_poses()[step::step][:waypoints]
        ego = self.ego_state()
        command = expert_mod.derive_command(self.road.network, rollout, 0,
                                            round(horizon_s / CONTROL_DT))
        return map_to_ego(poses[:, :2], ego.xy, ego.yaw), command

    def copy_road(self, radius: float) -> tuple[object, Vehicle]:
        """A deep copy of the road keeping vehicles within ``radius`` of the ego, and the
        ego's copy in it."""
        index = self.road.vehicles.index(self.ego)
        road = copy.deepcopy(self.road)
        ego = road.vehicles[index]
        road.vehicles = [v for v in road.vehicles
                         if v is ego or np.linalg.norm(v.position - ego.position) <= radius]
        return road, ego


@dataclass(frozen=True)
class LaneView:
    """A lane seen from outside highway-env: map-frame geometry, marking types."""

    key: tuple
    length: float
    width: float
    left_line: int     # highway-env LineType: 0 none, 1 striped, 2 continuous, 3 line
    right_line: int
    _lane: object

    def points(self, s: np.ndarray, lateral: np.ndarray | float = 0.0) -> np.ndarray:
        """Map points (N, 2) at arc lengths ``s`` and lateral offsets (positive: left)."""
        s = np.asarray(s, dtype=np.float64)
        lateral = np.broadcast_to(np.asarray(lateral, dtype=np.float64), s.shape)
        # highway-env's lateral coordinate grows to the right of the driving direction
        hw = np.stack([self._lane.position(si, -li) for si, li in zip(s, lateral)])
        return hw_to_map(hw)


def lane_views(network) -> list[LaneView]:
    """Every lane of a highway-env road network, in a stable order."""
    views = []
    for start, ends in network.graph.items():
        for end, lanes in ends.items():
            for index, lane in enumerate(lanes):
                views.append(LaneView(
                    key=(start, end, index), length=float(lane.length),
                    width=float(lane.width_at(0.0)), left_line=int(lane.line_types[0]),
                    right_line=int(lane.line_types[1]), _lane=lane))
    return views
