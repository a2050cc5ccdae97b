"""Waypoints -> (acceleration, steering): pure pursuit plus speed tracking.

A plan is the planner's 8 waypoints (ego frame at planning time, 0.5 s apart) fixed in the
map frame with the ego's position at planning time as its t = 0 point, so a plan stays
meaningful, and is simply followed further along in time, while the next one is awaited.

- Steering: pure pursuit on the plan's polyline with a speed-dependent look-ahead, turned
  into a steering angle through highway-env's kinematic bicycle model (slip angle
  ``beta = atan(tan(delta) / 2)``, path curvature ``sin(beta) / (L / 2)``). The model's
  centre moves along ``heading + beta``, and ``beta`` follows the steering at once, so the
  arc to the look-ahead point is solved for the slip it will itself have: with the point at
  ``alpha`` from the heading, ``L_d`` away, ``k = L / L_d``, ``tan(beta) = k sin(alpha) /
  (1 + k cos(alpha))``. (Steering from the motion direction of the last step instead feeds
  each step's slip back into the next: a two-step oscillation, growing where the look-ahead
  is shorter than the wheelbase, i.e. below 6.7 m/s.)
- Speed: the plan's speed profile read ``SPEED_LOOKAHEAD_S`` ahead, a proportional term
  and the profile's own acceleration as feed-forward, clipped to [-6, 3] m/s^2, rate
  limited (jerk) except when braking harder, and never reversing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wamdiff2_core.geometry import ego_to_map, map_to_ego

WAYPOINT_DT_S = 0.5
MIN_PATH_M = 0.5          # shorter plans (standing still) do not steer
EXTEND_CHORD_M = 3.0


@dataclass(frozen=True)
class ControllerConfig:
    lookahead_min_m: float = 4.0
    lookahead_time_s: float = 0.6
    wheelbase_m: float = 5.0          # highway-env's Vehicle.LENGTH
    max_steering_rad: float = math.pi / 4
    speed_lookahead_s: float = 0.5
    speed_gain: float = 1.0
    max_accel: float = 3.0
    max_decel: float = 6.0
    max_jerk: float = 4.0             # [m/s^3] smoothing of acceleration increases
    brake_jerk: float = 4.5           # [m/s^3] allowed when braking harder


@dataclass(frozen=True)
class Plan:
    """A plan fixed in the map frame: times (9,) from 0 and points (9, 2)."""

    start_time: float
    points: np.ndarray            # (9, 2) map frame, row 0 = ego position at start_time
    times: np.ndarray             # (9,) seconds after start_time

    @classmethod
    def from_waypoints(cls, waypoints: np.ndarray, ego_xy: np.ndarray, ego_yaw: float,
                       time: float) -> Plan:
        waypoints = np.asarray(waypoints, dtype=np.float64).reshape(-1, 2)
        points = np.vstack([np.asarray(ego_xy, dtype=np.float64)[None],
                            ego_to_map(waypoints, ego_xy, ego_yaw)])
        times = np.arange(len(points)) * WAYPOINT_DT_S
        return cls(start_time=float(time), points=points, times=times)

    @property
    def duration(self) -> float:
        return float(self.times[-1])

    def speed_at(self, tau: float) -> float:
        """Planned speed tau seconds after the start (piecewise constant per interval,
        linearly blended between interval midpoints)."""
        seg = np.linalg.norm(np.diff(self.points, axis=0), axis=1) / np.diff(self.times)
        mids = (self.times[:-1] + self.times[1:]) / 2
        return float(np.interp(tau, mids, seg))

    def accel_at(self, tau: float) -> float:
        step = 0.25
        return (self.speed_at(tau + step) - self.speed_at(tau - step)) / (2 * step)


def _point_at(starts: np.ndarray, seg: np.ndarray, lengths: np.ndarray,
              cumulative: np.ndarray, s: float) -> np.ndarray:
    j = int(np.clip(np.searchsorted(cumulative, s, side="right") - 1, 0, len(lengths) - 1))
    return starts[j] + seg[j] / lengths[j] * (s - cumulative[j])


def _lookahead_point(points: np.ndarray, position: np.ndarray, distance: float
                     ) -> np.ndarray | None:
    """The point ``distance`` metres along the polyline past the projection of
    ``position``. Past the end of the path it is extrapolated along the path's last
    ``EXTEND_CHORD_M`` metres (a chord, not the last tiny segment of a plan that comes to a
    stop, whose direction is noise). None when the path is shorter than MIN_PATH_M."""
    seg = np.diff(points, axis=0)                         # (n, 2)
    lengths = np.linalg.norm(seg, axis=1)
    keep = lengths > 1e-3
    if lengths[keep].sum() < MIN_PATH_M:
        return None
    starts, seg, lengths = points[:-1][keep], seg[keep], lengths[keep]
    rel = position - starts                               # (n, 2)
    t = np.clip(np.einsum("ij,ij->i", rel, seg) / lengths**2, 0.0, 1.0)
    closest = starts + seg * t[:, None]
    i = int(np.argmin(np.linalg.norm(closest - position, axis=1)))
    cumulative = np.concatenate([[0.0], np.cumsum(lengths)])
    total = cumulative[-1]
    target_s = cumulative[i] + t[i] * lengths[i] + distance
    if target_s <= total:
        return _point_at(starts, seg, lengths, cumulative, target_s)
    end = starts[-1] + seg[-1]
    chord = end - _point_at(starts, seg, lengths, cumulative, max(total - EXTEND_CHORD_M, 0.0))
    norm = np.linalg.norm(chord)
    if norm < 1e-6:          # the path came back to where the chord starts: last segment
        chord, norm = seg[-1], lengths[-1]
    return end + chord / norm * (target_s - total)


class TrackingController:
    """Follows the latest plan; one instance per episode."""

    def __init__(self, config: ControllerConfig = ControllerConfig()) -> None:
        self.config = config
        self.plan: Plan | None = None
        self._accel = 0.0

    def set_plan(self, plan: Plan) -> None:
        self.plan = plan

    def control(self, ego_xy: np.ndarray, ego_yaw: float, speed: float, time: float,
                dt: float) -> tuple[float, float]:
        """(acceleration [m/s^2], steering [rad]) for the current state."""
        cfg = self.config
        if self.plan is None:
            raise RuntimeError("no plan to follow")
        tau = time - self.plan.start_time
        # --- speed
        target = self.plan.speed_at(tau + cfg.speed_lookahead_s)
        accel = cfg.speed_gain * (target - speed) + self.plan.accel_at(tau + 0.25)
        accel = float(np.clip(accel, -cfg.max_decel, cfg.max_accel))
        limit = cfg.max_jerk * dt
        if accel > self._accel + limit:
            accel = self._accel + limit
        elif accel < self._accel - cfg.brake_jerk * dt:
            accel = self._accel - cfg.brake_jerk * dt
        accel = max(accel, -speed / dt)          # brake to a standstill, never reverse
        self._accel = accel
        # --- steering
        distance = max(cfg.lookahead_min_m, cfg.lookahead_time_s * speed)
        point = _lookahead_point(self.plan.points, np.asarray(ego_xy), distance)
        if point is None or speed < 0.05:
            return accel, 0.0
        local = map_to_ego(point, ego_xy, ego_yaw)
        alpha = math.atan2(local[1], local[0])
        k = cfg.wheelbase_m / max(float(np.hypot(*local)), 1e-3)
        beta = math.atan2(k * math.sin(alpha), 1.0 + k * math.cos(alpha))
        beta = float(np.clip(beta, -math.asin(0.99), math.asin(0.99)))
        steering = math.atan(2.0 * math.tan(beta))
        return accel, float(np.clip(steering, -cfg.max_steering_rad, cfg.max_steering_rad))

    def control_world(self, world, dt: float) -> tuple[float, float]:
        """:meth:`control` for the ego of a ``World`` now, for a control step of ``dt``."""
        ego = world.ego_state()
        return self.control(ego.xy, ego.yaw, ego.speed, world.time, dt)
