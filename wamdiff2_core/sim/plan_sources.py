"""Where the closed loop's plans come from: a planner in this process, or a planner elsewhere.

The runner captures a :class:`CameraFrame` at the camera rate and hands it to a *plan
source*; what comes back is a :class:`PlanOutcome` per planned frame (a plan, or the reason
there is none). A source answers in one of two ways:

- blocking (``plan``): the answer to one frame, computed now; the runner's schedule
  decides when, in simulated time, it arrives (at once in the synchronous loop, after the
  modelled latency under ``--time latency-model``). :class:`InProcessSource` wraps a
  planner function of :mod:`wamdiff2_core.sim.planners` this way.
- streaming (``submit`` / ``poll``, ``streaming = True``): frames go out as they are
  captured and answers come back when they come (``--time realtime``); the source notes
  each answer's wall-clock arrival and the schedule turns it into simulated time. The ROS
  node driver (``wamdiff2_ros.tools.closed_loop_node``) is one.

A source that can no longer answer at all (a planner process that died or hangs) raises
:class:`PlannerUnavailable`: the episode ends there as a failure with that reason, and the
run goes on with the next episode.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.sim.planners import PlannerFn, SimObservation
from wamdiff2_core.tasks import AnswerParseError

#: PlanOutcome.failure values, each counted in the episode's planner statistics.
FAILURES = ("parse_failure", "invalid_plan", "model_error")


class PlannerUnavailable(RuntimeError):
    """The planner cannot answer any more; the message is the reason (one sentence)."""


@dataclass(frozen=True)
class CameraFrame:
    """One captured camera frame and everything a planner is given with it."""

    stamp: float                   # simulation time of the image [s]
    image: np.ndarray              # (H, W, 3) uint8 RGB
    observation: SimObservation    # command, velocity, acceleration (ego frame), expert plan
    ego_xy: np.ndarray             # (2,) the ego's map position at ``stamp``
    ego_yaw: float                 # its map heading at ``stamp``


@dataclass(frozen=True)
class EgoTick:
    """The ego's state at one control step (what a vehicle's odometry reports)."""

    time: float                    # simulation time [s]
    xy: np.ndarray                 # (2,) map frame
    yaw: float
    velocity: np.ndarray           # (2,) ego frame, m/s
    yaw_rate: float                # rad/s


@dataclass(frozen=True)
class PlanOutcome:
    """What became of one planned frame.

    ``points`` are the plan's 8 waypoints in ``frame``: ``"ego"`` (the ego frame at the
    image's stamp, x forward, y left) or ``"map"`` (the simulator's map frame, which is the
    odometry frame the simulator publishes). None with ``failure`` set when there is no plan.
    """

    stamp: float                             # the frame's stamp [s]
    points: np.ndarray | None
    failure: str | None = None               # one of FAILURES, or None
    reason: str = ""
    frame: str = "ego"
    stats: DecodeStats | None = None         # the decode's cost, where the planner says
    compute_s: float = 0.0                   # wall seconds the planner spent on it
    received_wall: float | None = None       # time.perf_counter() on arrival (streaming)
    received_s: float | None = None          # simulation time of arrival (set by schedules)
    warm: bool = False                       # the episode's warm-start plan (no latency)


class PlanSource(Protocol):
    """What the runner needs from a planner (see the module docstring)."""

    name: str
    streaming: bool

    def begin_episode(self, index: int, scenario: str, seed: int) -> None: ...

    def tick(self, ego: EgoTick) -> None:
        """Called at every control step before any frame of that step."""

    def plan(self, frame: CameraFrame, start_s: float) -> PlanOutcome:
        """Blocking: the answer to ``frame``, planning from simulation time ``start_s``."""

    def submit(self, frame: CameraFrame) -> None:
        """Streaming: send ``frame`` out now."""

    def poll(self) -> list[PlanOutcome]:
        """Streaming: the answers that arrived since the last poll, oldest first."""

    def pause(self) -> None:
        """Streaming: the simulator computes; the planner must not gain time meanwhile."""

    def resume(self) -> None: ...

    def end_episode(self, failure: str | None) -> None:
        """The episode is over; ``failure``: why the planner stopped answering, if it did."""

    def close(self) -> None: ...


class InProcessSource:
    """A planner function called in this process (blocking only), on a worker thread of its
    own, as the node plans: with torch's default two threads on the loaded 2-core machine,
    plans driven from the main thread ran 20-40x slower (112 s against 2.6 s for the
    bundled model; with OMP_NUM_THREADS=1 both took 2.1-2.7 s).

    The function returns 8 waypoints, or a ``PlanResult`` (whose decode statistics a latency
    model prices); an ``AnswerParseError`` is a parse failure (its ``stats``, when the
    planner attached them, still price the decode). Any other exception propagates: a
    planner bug stops the run instead of scoring as a bad plan.
    """

    streaming = False

    def __init__(self, planner: PlannerFn, name: str = "in-process"):
        self.planner = planner
        self.name = name
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")

    def plan(self, frame: CameraFrame, start_s: float) -> PlanOutcome:
        return self._worker.submit(self._plan, frame).result()

    def _plan(self, frame: CameraFrame) -> PlanOutcome:
        started = time.perf_counter()
        try:
            result = self.planner(frame.observation, frame.image)
        except AnswerParseError as exc:
            return PlanOutcome(frame.stamp, None, "parse_failure", exc.reason,
                               stats=getattr(exc, "stats", None),
                               compute_s=time.perf_counter() - started)
        return PlanOutcome(frame.stamp, getattr(result, "waypoints", result),
                           stats=getattr(result, "stats", None),
                           compute_s=time.perf_counter() - started)

    def begin_episode(self, index: int, scenario: str, seed: int) -> None:
        pass

    def tick(self, ego: EgoTick) -> None:
        pass

    def submit(self, frame: CameraFrame) -> None:
        raise NotImplementedError("an in-process planner answers blocking calls only")

    def poll(self) -> list[PlanOutcome]:
        return []

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def end_episode(self, failure: str | None) -> None:
        pass

    def close(self) -> None:
        self._worker.shutdown(wait=True)
