"""What the ego follows: arriving plans, the fallback rule, and the planner's statistics.

A valid plan is placed where its camera frame was taken (the ego's map pose at the
frame's stamp) and indexed by time from that stamp, so a plan that arrives late is
followed from where the ego is *now* along it: an old image gives an old plan.

Safe fallback when a frame gets no plan (``AnswerParseError``: unparseable answer; a
result that is not 8 finite (x, y) pairs; a planner error): keep following the last
plan, which is fixed in the map frame and indexed by time, while it is younger than
``plan_max_age_s``; otherwise (no plan yet, or too old) brake to a standstill at
``fallback_decel`` m/s^2 along the centre of the current lane. When the world does not
wait for the planner (``--time latency-model`` / ``realtime``), the same brake is applied
while no plan has arrived yet (only without the warm start, or when the first answer
failed) and when the followed plan grows older than ``plan_max_age_s`` with no answer at
all (``stale_brakes``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wamdiff2_core.geometry import map_to_ego
from wamdiff2_core.sim.controller import Plan, TrackingController
from wamdiff2_core.sim.plan_sources import PlanOutcome

FALLBACK_TEXT = ("on a planner failure (unparseable answer or invalid waypoints) the last "
                 "valid plan is followed further along in time while it is younger than "
                 "{age:g} s; without one, the ego brakes to a standstill at {decel:g} m/s^2 "
                 "along the centre of its lane")


@dataclass
class PlannerStats:
    """How the planner fared in one episode (counts of planned frames, unless noted)."""

    plans: int = 0                 # valid plans
    parse_failures: int = 0        # AnswerParseError
    invalid_plans: int = 0         # not 8 finite (x, y) pairs
    model_errors: int = 0          # the planner raised (a node reports it)
    reused_plan_steps: int = 0     # failures covered by the last valid plan
    brake_fallbacks: int = 0       # failures (or no plan yet) answered by braking in lane
    stale_brakes: int = 0          # brakes because the followed plan grew too old
    frames: int = 0                # camera frames captured
    frames_without_new_plan: int = 0   # camera periods in which no valid plan arrived
    dropped_frames: int = 0        # frames replaced while the planner was busy (modelled)
    compute_s: list = field(default_factory=list)     # wall seconds per answer (timing)
    latencies_s: list = field(default_factory=list)   # per valid plan: stamp -> arrival
    arrivals_s: list = field(default_factory=list)    # ... and its arrival time
    plan_ages_s: list = field(default_factory=list)   # per control step following a plan
    age_times_s: list = field(default_factory=list)   # ... and that step's time

    SERIES = ("compute_s", "latencies_s", "arrivals_s", "plan_ages_s", "age_times_s")


def valid_waypoints(points, frame: str = "ego", pose: tuple[np.ndarray, float] | None = None
                    ) -> np.ndarray | None:
    """8 finite (x, y) waypoints in the ego frame at ``pose`` (``frame`` "map": given in
    the map frame and moved into it), or None when they are not that."""
    try:
        array = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if array.shape != (8, 2) or not np.isfinite(array).all():
        return None
    if frame == "map":
        array = map_to_ego(array, *pose)
    return array if np.abs(array).max() <= 1000 else None


class PlanFollower:
    """Applies outcomes to the controller with the fallback rule; keeps ``stats``."""

    def __init__(self, controller: TrackingController, plan_max_age_s: float,
                 fallback_decel: float, waits: bool):
        self.controller = controller
        self.max_age, self.decel = plan_max_age_s, fallback_decel
        self.waits = waits                  # the world waits for every plan (sync)
        self.stats = PlannerStats()
        self.poses: dict[float, tuple[np.ndarray, float]] = {}   # frame stamp -> map pose
        self._planner_plan = False          # following a planner's plan (not a brake)
        self._new_plan = False              # a valid plan arrived in this camera period

    def frame_captured(self, stamp: float, xy: np.ndarray, yaw: float) -> None:
        """A frame was taken: remember its pose; close the previous camera period."""
        self.close_period()
        self.stats.frames += 1
        self.poses[stamp] = (np.asarray(xy, dtype=np.float64), float(yaw))

    def close_period(self) -> None:
        if self.stats.frames and not self._new_plan:
            self.stats.frames_without_new_plan += 1
        self._new_plan = False

    def apply(self, outcomes: list[PlanOutcome], world) -> None:
        """Follow each arrived plan, or apply the fallback rule for a frame without one."""
        for outcome in outcomes:
            self.stats.compute_s.append(outcome.compute_s)
            pose = self.poses.pop(outcome.stamp, None)
            if pose is None:
                continue                    # not a frame of this episode
            waypoints = None
            if outcome.failure is None:
                waypoints = valid_waypoints(outcome.points, outcome.frame, pose)
                if waypoints is None:
                    self.stats.invalid_plans += 1
            else:
                kind = {"parse_failure": "parse_failures", "invalid_plan": "invalid_plans"}
                name = kind.get(outcome.failure, "model_errors")
                setattr(self.stats, name, getattr(self.stats, name) + 1)
            if waypoints is not None:
                self.stats.plans += 1
                if not outcome.warm:             # the warm start has no latency
                    self.stats.latencies_s.append(outcome.received_s - outcome.stamp)
                    self.stats.arrivals_s.append(outcome.received_s)
                self.controller.set_plan(Plan.from_waypoints(waypoints, *pose, outcome.stamp))
                self._planner_plan = self._new_plan = True
                continue
            plan = self.controller.plan
            if plan is not None and world.time - plan.start_time < self.max_age:
                self.stats.reused_plan_steps += 1
                continue
            self.stats.brake_fallbacks += 1
            self._brake(world)

    def check(self, world) -> None:
        """Brake while there is no plan yet, or (world not waiting) when the followed plan
        has grown too old with no answer; then note the followed plan's age."""
        plan = self.controller.plan
        if plan is None:
            self.stats.brake_fallbacks += 1
            self._brake(world)
        elif (not self.waits and self._planner_plan
              and world.time - plan.start_time >= self.max_age):
            self.stats.stale_brakes += 1
            self._brake(world)
        if self._planner_plan:
            self.stats.plan_ages_s.append(world.time - self.controller.plan.start_time)
            self.stats.age_times_s.append(world.time)

    def _brake(self, world) -> None:
        ego = world.ego_state()
        self.controller.set_plan(Plan.from_waypoints(
            world.lane_brake_waypoints(self.decel), ego.xy, ego.yaw, world.time))
        self._planner_plan = False
