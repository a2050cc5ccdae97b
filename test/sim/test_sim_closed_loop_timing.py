"""The closed loop in time: latency models, the modelled and real-time schedules, plans placed
by their frame's stamp, a planner that stops answering, the report's timing fields."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.evaluation.closed_loop_report import build_report, format_text
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
from wamdiff2_core.sim.latency import (NAMED_PROFILES, FixedLatency, ProfileLatency,
                                       parse_latency_model)
from wamdiff2_core.sim.plan_sources import InProcessSource, PlannerUnavailable, PlanOutcome
from wamdiff2_core.sim.planners import make_planner
from wamdiff2_core.sim.schedules import ModelledSchedule, RealTimeSchedule

H200 = NAMED_PROFILES["h200"][0]
HIGHWAY = dict(episodes=1, seed=1000, scenarios=("highway",), duration_s=6.0)


# ------------------------------------------------------------------------------ latency models
def test_latency_model_specs_and_errors():
    assert parse_latency_model("zero").seconds(None) == 0.0
    assert parse_latency_model("fixed:250").seconds(None) == pytest.approx(0.25)
    for bad, words in (("fixed:x", "milliseconds"), ("fixed:-1", "must be in"),
                       ("warp:9", "unknown latency model"), ("zero:3", "no argument"),
                       ("h200:fast", "no argument but ':ar'"),
                       (f"profile:{H200}@nope", "no latency_ms.nope"),
                       ("profile:/no/such.json", "does not exist")):
        with pytest.raises(ValueError, match=words):
            parse_latency_model(bad)


def test_h200_profile_prices_diffusion_and_ar_decodes_by_their_forwards():
    report = json.loads(Path(H200).read_text())
    graphs = report["latency_ms"]["graphs"]
    prefill = np.mean([report["decoders"][n]["prefill_ms_per_call"]
                       for n in ("ar_optimised", "diffusion_fast")])
    model = parse_latency_model("h200")
    assert isinstance(model, ProfileLatency) and model.prefill_ms == pytest.approx(prefill)
    # block 32: 87 tokens in 3 blocks, 24 denoising forwards and 3 commits
    diffusion = DecodeStats(tokens=87, forwards=27, denoise_forwards=24, blocks=3)
    assert model.seconds(diffusion) == pytest.approx(
        (prefill + 24 * graphs["block_step"] + 3 * graphs["commit"]) / 1e3)
    ar = DecodeStats(tokens=87, forwards=87, denoise_forwards=0, blocks=87)   # one per block
    assert model.seconds(ar) == pytest.approx((prefill + 87 * graphs["ar_step"]) / 1e3)
    assert model.seconds(ar) > 2 * model.seconds(diffusion)
    as_ar = parse_latency_model("h200:ar")       # the same plans at an AR decoder's pace
    assert as_ar.seconds(diffusion) == pytest.approx(model.seconds(ar))
    assert parse_latency_model(f"profile:{H200}@graphs:ar").seconds(diffusion) == \
        pytest.approx(model.seconds(ar))
    with pytest.raises(ValueError, match="fixed:MS"):
        model.seconds(None)                     # a planner that is not a model


def test_config_rejects_what_cannot_run():
    for bad, words in ((dict(time_mode="warp"), "unknown time mode"),
                       (dict(latency="fixed:100"), "applies to time mode latency-model"),
                       (dict(replan_interval_s=0.25), "whole number"),
                       (dict(time_mode="latency-model", latency="fixed:x"), "milliseconds")):
        with pytest.raises(ValueError, match=words):
            ClosedLoopConfig(**bad)
    with pytest.raises(ValueError, match="--through-node"):
        run_closed_loop(make_planner("expert"), ClosedLoopConfig(time_mode="realtime"))


# ------------------------------------------------------------------------------ schedules
class _Frame:
    def __init__(self, stamp):
        self.stamp = stamp


class _CountingSource(InProcessSource):
    """An in-process source whose 'plans' are the frame stamps (no model)."""

    def __init__(self):
        super().__init__(lambda observation, image: np.zeros((8, 2)))
        self.started = []

    def plan(self, frame, start_s):
        self.started.append((frame.stamp, start_s))
        return PlanOutcome(frame.stamp, np.zeros((8, 2)))


def test_modelled_schedule_keeps_the_newest_frame_while_busy():
    source = _CountingSource()
    schedule = ModelledSchedule(source, FixedLatency(700.0), warm_start=False)
    arrived = []
    for step in range(31):                         # 3 s of 10 Hz steps, frames at 2 Hz
        now = round(step * 0.1, 6)
        arrived += schedule.arrivals(now)
        if step % 5 == 0:
            schedule.frame(_Frame(now))
        arrived += schedule.arrivals(now)
    # 0.0 plans at once and arrives at 0.7; 0.5 waits and starts then (arrives 1.4); 1.0
    # starts at 1.4 (arrives 2.1); 1.5 is replaced by 2.0 while waiting (dropped), which
    # starts at 2.1; 2.5 starts at 2.8
    assert [(f, round(s, 6)) for f, s in source.started] == [
        (0.0, 0.0), (0.5, 0.7), (1.0, 1.4), (2.0, 2.1), (2.5, 2.8)]
    assert schedule.dropped_frames == 1
    assert [round(o.received_s, 6) for o in arrived] == [0.7, 1.4, 2.1, 2.8]
    source.close()


def test_zero_latency_model_drives_exactly_like_the_synchronous_loop():
    sync = ClosedLoopConfig(**HIGHWAY)
    zero = ClosedLoopConfig(**HIGHWAY, time_mode="latency-model", latency="fixed:0")
    (a,), (b,) = (run_closed_loop(make_planner("constant-velocity"), c, progress=False)
                  for c in (sync, zero))
    assert a.log.ego.tolist() == b.log.ego.tolist() and a.score == b.score
    assert a.stats.latencies_s == [0.0] * a.stats.plans
    assert b.stats.latencies_s == [0.0] * (b.stats.plans - 1)       # less the warm start


def test_latency_costs_the_expert_and_the_report_says_how_much():
    sync = ClosedLoopConfig(**HIGHWAY)
    slow = ClosedLoopConfig(**HIGHWAY, time_mode="latency-model", latency="fixed:1300",
                            warm_start=False)
    (fast,), (late,) = (run_closed_loop(make_planner("expert"), c, progress=False)
                        for c in (sync, slow))
    report = build_report([late], "expert", slow, 0.0, latency_model={"name": "fixed",
                                                                       "ms": 1300.0})
    timing = report["latency"]
    assert timing["latency_ms"]["p50"] >= 1300 and timing["plan_age_s"]["p50"] > 1.3
    assert timing["frames"] == 12 and timing["frames_without_new_plan"] >= 4
    assert timing["dropped_frames"] >= 1 and report["time_mode"] == "latency-model"
    assert late.stats.plans < fast.stats.plans == 12
    assert late.stats.brake_fallbacks == 1        # until the first plan arrived (1.3 s)
    assert late.score.terms()["ep"] < fast.score.terms()["ep"]
    text = format_text(report)
    assert "time latency-model (fixed 1300 ms)" in text and "frames without a new plan" in text
    sync_report = build_report([fast], "expert", sync, 0.0)["latency"]
    assert sync_report["latency_ms"]["p50"] == 0 and sync_report["frames_without_new_plan"] == 0


def test_a_warm_start_waits_for_the_first_plan_only():
    """By default an episode starts as if the planner had been running: the first frame's
    plan is there at t = 0 (no brake, no latency counted); the next ones come late."""
    config = ClosedLoopConfig(**HIGHWAY, time_mode="latency-model", latency="fixed:1300")
    (warm,) = run_closed_loop(make_planner("expert"), config, progress=False)
    assert warm.stats.brake_fallbacks == 0 and warm.stats.plan_ages_s[0] == 0.0
    assert len(warm.stats.latencies_s) == warm.stats.plans - 1
    assert min(warm.stats.latencies_s) >= 1.3 and warm.stats.age_times_s[0] == 0.0


def test_a_plan_is_placed_where_its_frame_was_taken():
    """A 1 s late expert plan is followed from the pose and time of its frame, so in the
    racetrack's bends the ego keeps to the expert's path (0.4 m here; placed at the current
    pose instead, the same plans lie a second ahead of themselves: 2.2 m off, off road)."""
    config = ClosedLoopConfig(episodes=1, seed=1000, scenarios=("racetrack",), duration_s=8.0,
                              time_mode="latency-model", latency="fixed:1000")
    (result,) = run_closed_loop(make_planner("expert"), config, progress=False)
    assert result.log.collision_step is None and result.log.on_drivable.all()
    assert result.stats.stale_brakes == 0 and result.stats.plans >= 5
    assert min(result.stats.latencies_s) >= 1.0
    ego = result.log.ego[:, :2]
    gap = np.min(np.linalg.norm(ego[:, None] - result.expert_path[None], axis=2), axis=1)
    assert gap.max() < 1.0                               # metres off the expert's path


# ------------------------------------------------------------------------------ real time
class _ThreadSource:
    """A streaming source: a thread answers each frame with the expert's plan after
    ``delay_s`` of *running* wall time (paused while the simulator computes)."""

    name, streaming = "thread", True

    def __init__(self, delay_s: float, answer_until_s: float = 1e9):
        self.delay_s, self.answer_until_s = delay_s, answer_until_s
        self.expert = make_planner("expert")
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._done: list[PlanOutcome] = []
        self.paused_for = 0.0

    def _answer(self, frame):
        waited = 0.0
        while waited < self.delay_s:          # count only the time we are allowed to run
            self._running.wait()
            time.sleep(0.005)
            waited += 0.005
        outcome = PlanOutcome(frame.stamp, self.expert(frame.observation, frame.image),
                              received_wall=time.perf_counter())
        with self._lock:
            self._done.append(outcome)

    def submit(self, frame):
        if frame.stamp <= self.answer_until_s:
            threading.Thread(target=self._answer, args=(frame,), daemon=True).start()

    def poll(self):
        with self._lock:
            out, self._done = self._done, []
        return out

    def pause(self):
        self._running.clear()

    def resume(self):
        self._running.set()

    def begin_episode(self, *args):
        pass

    def tick(self, ego):
        pass

    def end_episode(self, failure):
        self._running.set()

    def close(self):
        pass


def test_realtime_latency_is_the_planners_running_time_not_the_simulators():
    config = ClosedLoopConfig(episodes=1, seed=1000, scenarios=("highway",), duration_s=3.0,
                              time_mode="realtime")
    (result,) = run_closed_loop(_ThreadSource(0.35), config, progress=False)
    latencies = result.stats.latencies_s
    # 0.35 s of running time, seen at the next 0.1 s control step; never the simulator's
    # own (paused, uncounted) time, which is several times that per frame here
    assert len(latencies) >= 4 and all(0.3 <= x <= 0.5 + 1e-6 for x in latencies)
    assert result.failure is None and result.score.score > 0.5


def test_a_planner_that_stops_answering_fails_its_episode_and_the_run_goes_on():
    config = ClosedLoopConfig(episodes=2, seed=1000, scenarios=("highway",), duration_s=4.0,
                              time_mode="realtime", answer_timeout_s=1.0)
    source = _ThreadSource(0.2, answer_until_s=1.0)      # then silence
    results = run_closed_loop(source, config, progress=False)
    assert "no answer from the planner for" in results[0].failure
    assert results[0].score.score == 0.0 and results[0].stats.plans >= 2
    report = build_report(results, "thread", config, 0.0)
    assert report["failed_episodes"][0]["index"] == 0
    assert "episode 0 FAILED: no answer" in format_text(report)
    assert len(results) == 2 and results[1].index == 1      # the run went on


def test_realtime_sim_time_mapping_and_timeout_with_a_fake_clock():
    """An answer's arrival maps to simulated time within the wait it came in; frames with
    no answer for longer than the timeout make the planner unavailable."""
    wall = [100.0]
    answers = [PlanOutcome(0.0, np.zeros((8, 2)), received_wall=100.03)]

    class Source(_ThreadSource):
        def submit(self, frame):
            pass

        def poll(self):
            out, answers[:] = list(answers), []
            return out

    def sleep(seconds):
        wall[0] += seconds

    schedule = RealTimeSchedule(Source(0.0), answer_timeout_s=0.25, warm_start=False,
                                clock=lambda: wall[0], sleep=sleep)
    schedule.frame(_Frame(0.0))
    schedule.wait(0.0, 0.1)                               # wall 100.0 -> 100.1
    (outcome,) = schedule.arrivals(0.1)
    assert outcome.received_s == pytest.approx(0.03)
    schedule.frame(_Frame(0.1))                           # never answered
    assert schedule.arrivals(0.3) == []
    with pytest.raises(PlannerUnavailable, match="no answer from the planner for 0.3 s"):
        schedule.arrivals(0.4)
