"""What the node publishes for a planned frame that has no valid plan of its own.

Never silent: a frame the node plans always yields a Path. When the model's answer fails (an
exception, a timeout, an answer that does not parse, odometry too old to plan with), the
`fallback` parameter chooses the replacement:

- ``last_plan``: the last valid plan, re-timed to the new frame's stamp (the ego assumed to
  have followed it) while it is at most `fallback_max_age_s` old; else a stop.
- ``stop``: a straight braking trajectory from the current speed at `stop_decel_mps2`.

The `~/output/status` message and /diagnostics say which was published and why.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from wamdiff2_core.geometry import retime_waypoints, stop_waypoints
from wamdiff2_core.tasks import WAYPOINT_DT_S
from wamdiff2_ros.node.params import FALLBACKS, NodeConfig

MODEL, LAST_PLAN, STOP = "model", "last_plan", "stop"     # where a published Path came from


@dataclass(frozen=True)
class Plan:
    """Waypoints (N, 2), ego frame at `stamp` (seconds), 0.5 s apart, and their source."""

    stamp: float
    waypoints: np.ndarray
    source: str = MODEL
    age_s: float | None = None       # how old the re-timed plan was (last_plan only)


class LastPlan:
    """The newest valid model plan (thread-safe); forgotten on cleanup and time jumps."""

    def __init__(self):
        self._lock = threading.Lock()
        self._plan: Plan | None = None

    def remember(self, plan: Plan) -> None:
        with self._lock:
            if self._plan is None or plan.stamp >= self._plan.stamp:
                self._plan = plan

    def forget(self) -> None:
        with self._lock:
            self._plan = None

    def get(self) -> Plan | None:
        with self._lock:
            return self._plan


def _stop(last: Plan | None, stamp: float, speed: float, config: NodeConfig) -> Plan:
    return Plan(stamp, stop_waypoints(speed, config.stop_decel_mps2, step_s=WAYPOINT_DT_S),
                STOP)


def _last_plan(last: Plan | None, stamp: float, speed: float, config: NodeConfig) -> Plan:
    if last is not None and 0.0 <= stamp - last.stamp <= config.fallback_max_age_s:
        age = stamp - last.stamp
        return Plan(stamp, retime_waypoints(last.waypoints, age, WAYPOINT_DT_S), LAST_PLAN,
                    age)
    return _stop(last, stamp, speed, config)


Policy = Callable[[Plan | None, float, float, NodeConfig], Plan]
POLICIES: dict[str, Policy] = {LAST_PLAN: _last_plan, STOP: _stop}
if tuple(POLICIES) != FALLBACKS:                  # the parameter's choices are listed once
    raise ImportError(f"fallback policies {tuple(POLICIES)} differ from params.FALLBACKS "
                      f"{FALLBACKS}")


def fallback_plan(config: NodeConfig, last: Plan | None, stamp: float, speed: float) -> Plan:
    """The replacement plan for the frame stamped `stamp` under `config.fallback`; `speed`:
    the current forward speed (m/s; 0 when unknown), where a stop starts from."""
    return POLICIES[config.fallback](last, stamp, speed, config)
