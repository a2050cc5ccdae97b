"""When, in simulated time, a plan arrives: the closed loop's time modes.

``--time`` (``TIME_MODES``):

- ``sync``: the world waits for every plan, which arrives at its frame's own instant (no
  latency at all: the closed loop as it always was).
- ``latency-model``: the world waits while the planner computes, but a plan arrives
  ``model.seconds(its decode)`` of simulated time after planning started
  (:mod:`wamdiff2_core.sim.latency`). While the planner is busy, frames queue in a slot of
  one, the newest replacing the older (counted as dropped), exactly as in the node; the
  next plan starts when the previous one arrives.
- ``realtime``: the world does not wait. Simulated time advances with wall-clock time
  while the simulator waits between its 10 Hz control steps; the planner (a streaming
  source, e.g. the ROS node) runs meanwhile and its answers arrive when they arrive. The
  simulator's own work (traffic, the expert's look-ahead for the command, rendering)
  takes no simulated time: the source is paused while it runs (the node's process is
  stopped), so one second of simulated time is one second of the planner's wall-clock
  time however slow the simulator is.

Either way plans take effect at the first control step at or after their arrival, placed
by their frame's stamp (a plan made from an old image is an old plan).

Warm start (``warm_start``, the default; nothing to warm in ``sync``): an episode begins as if the planner had been
running before it, as a vehicle's does: the world waits for the plan of the episode's first
frame, which arrives at that frame's instant (``PlanOutcome.warm``; not counted in the
latency figures). From then on the world does not wait. Without it the ego brakes in lane
until the first plan arrives (a planner that starts while the car is at speed).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Protocol

from wamdiff2_core.sim.latency import FixedLatency, LatencyModel
from wamdiff2_core.sim.plan_sources import (CameraFrame, PlannerUnavailable, PlanOutcome,
                                            PlanSource)

EPS = 1e-9


class Schedule(Protocol):
    dropped_frames: int

    def begin(self) -> None:
        """The episode's first control step is about to run."""

    def end(self) -> None:
        """The episode is over (also after an error): leave the source running."""

    def frame(self, frame: CameraFrame) -> None:
        """A frame was captured at ``frame.stamp`` (the current simulation time)."""

    def arrivals(self, now: float) -> list[PlanOutcome]:
        """The outcomes that arrived by simulation time ``now``, oldest first, each with
        ``received_s`` set."""

    def wait(self, now: float, next_s: float) -> None:
        """Let simulation time run from ``now`` to ``next_s`` (the next control step)."""


class ModelledSchedule:
    """A blocking source whose plans take ``latency.seconds(stats)`` of simulated time."""

    def __init__(self, source: PlanSource, latency: LatencyModel, warm_start: bool = True):
        self.source, self.latency, self.warm_start = source, latency, warm_start
        self.dropped_frames = 0
        self._pending: CameraFrame | None = None
        self._in_flight: PlanOutcome | None = None
        self._warm = warm_start

    def begin(self) -> None:
        self._warm = self.warm_start

    def end(self) -> None:
        pass

    def _start(self, frame: CameraFrame, start_s: float) -> None:
        outcome = self.source.plan(frame, start_s)
        if self._warm:
            self._warm = False
            self._in_flight = replace(outcome, received_s=start_s, warm=True)
            return
        self._in_flight = replace(outcome, received_s=start_s + self.latency.seconds(
            outcome.stats))

    def frame(self, frame: CameraFrame) -> None:
        if self._in_flight is None:
            self._start(frame, frame.stamp)
            return
        if self._pending is not None:
            self.dropped_frames += 1
        self._pending = frame

    def arrivals(self, now: float) -> list[PlanOutcome]:
        out = []
        while self._in_flight is not None and self._in_flight.received_s <= now + EPS:
            done, self._in_flight = self._in_flight, None
            out.append(done)
            if self._pending is not None:
                frame, self._pending = self._pending, None
                self._start(frame, max(done.received_s, frame.stamp))
        return out

    def wait(self, now: float, next_s: float) -> None:
        pass


class RealTimeSchedule:
    """A streaming source; simulated time runs with wall time only while the simulator waits.

    ``answer_timeout_s``: simulated seconds without any answer (while frames went out) after
    which the planner counts as hung (PlannerUnavailable).
    """

    def __init__(self, source: PlanSource, answer_timeout_s: float, warm_start: bool = True,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        if not source.streaming:
            raise ValueError(f"--time realtime needs a planner that runs on its own (the ROS "
                             f"node: --through-node); {source.name} answers blocking calls")
        self.source, self.answer_timeout_s = source, answer_timeout_s
        self.warm_start = warm_start
        self._clock, self._sleep = clock, sleep
        self.dropped_frames = 0
        self._interval: tuple[float, float, float] | None = None   # wall start, sim start, end
        self._waiting_since: float | None = None    # sim time of the oldest unanswered frame
        self._warm: list[PlanOutcome] | None = None  # the warm-start answer, until delivered

    def begin(self) -> None:
        self.source.pause()
        self._interval, self._waiting_since = None, None
        self._warm = [] if self.warm_start else None

    def end(self) -> None:
        self.source.resume()

    def frame(self, frame: CameraFrame) -> None:
        if self._warm == []:
            self._warm = [self._wait_for_answer(frame)]
            return
        self.source.submit(frame)
        if self._waiting_since is None:
            self._waiting_since = frame.stamp

    def _wait_for_answer(self, frame: CameraFrame) -> PlanOutcome:
        """The warm start: the world waits (wall time) for the answer to ``frame``."""
        self.source.resume()
        try:
            self.source.submit(frame)
            deadline = self._clock() + self.answer_timeout_s
            while True:
                answers = self.source.poll()
                if answers:
                    return replace(answers[-1], received_s=frame.stamp, warm=True)
                if self._clock() > deadline:
                    raise PlannerUnavailable(f"no answer from the planner to the episode's "
                                             f"first frame within {self.answer_timeout_s:g} s")
                self._sleep(0.01)
        finally:
            self.source.pause()

    def _sim_time(self, wall: float, now: float) -> float:
        if self._interval is None:
            return now
        wall0, sim0, sim1 = self._interval
        return min(max(sim0 + (wall - wall0), sim0), sim1)

    def arrivals(self, now: float) -> list[PlanOutcome]:
        if self._warm:
            out, self._warm = self._warm, None
            return out
        out = [replace(o, received_s=self._sim_time(o.received_wall, now))
               for o in self.source.poll()]
        if out:
            self._waiting_since = None
        elif (self._waiting_since is not None
              and now - self._waiting_since > self.answer_timeout_s + EPS):
            raise PlannerUnavailable(f"no answer from the planner for "
                                     f"{now - self._waiting_since:.1f} s of simulated time")
        return out

    def wait(self, now: float, next_s: float) -> None:
        self.source.resume()
        wall0 = self._clock()
        self._interval = (wall0, now, next_s)
        remaining = next_s - now
        while remaining > 1e-6:               # (a microsecond short is on time)
            self._sleep(remaining)
            remaining = next_s - now - (self._clock() - wall0)
        self.source.pause()


def _sync(source: PlanSource, latency: LatencyModel, answer_timeout_s: float,
          warm_start: bool) -> Schedule:
    return ModelledSchedule(source, FixedLatency(0.0, name="zero"), warm_start=False)


def _modelled(source: PlanSource, latency: LatencyModel, answer_timeout_s: float,
              warm_start: bool) -> Schedule:
    return ModelledSchedule(source, latency, warm_start)


def _realtime(source: PlanSource, latency: LatencyModel, answer_timeout_s: float,
              warm_start: bool) -> Schedule:
    return RealTimeSchedule(source, answer_timeout_s, warm_start)


TIME_MODES: dict[str, Callable[[PlanSource, LatencyModel, float, bool], Schedule]] = {
    "sync": _sync,
    "latency-model": _modelled,
    "realtime": _realtime,
}
