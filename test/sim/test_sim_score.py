"""The closed-loop score's terms on constructed logs."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from wamdiff2_core.evaluation.pdms import (EpisodeLog, ScoreConfig, comfort_ok, pdms, savgol,
                                           score_episode, struck_at_fault, summarize,
                                           ttc_violation)

DT = 0.1


def _straight(speeds: np.ndarray) -> np.ndarray:
    """(T, 4) x, y, yaw, speed along +x with the given speed profile."""
    x = np.concatenate([[0.0], np.cumsum(speeds[:-1] * DT)])
    return np.stack([x, np.zeros_like(x), np.zeros_like(x), speeds], axis=1)


def _log(ego: np.ndarray, **kwargs) -> EpisodeLog:
    steps = len(ego) - 1
    progress = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(ego[:, :2], axis=0).T))])
    fields = dict(dt=DT, nominal_steps=steps, ego=ego, ego_size=(5.0, 2.0),
                  others=[np.zeros((0, 6))] * len(ego), on_drivable=np.ones(len(ego), bool),
                  progress=progress, expert_progress=progress.copy())
    fields.update(kwargs)
    return EpisodeLog(**fields)


def test_pdms_formula():
    assert pdms(1, 1, 1, 1, 1) == pytest.approx(1.0)
    assert pdms(1, 1, 0.5, 1, 0) == pytest.approx((2.5 + 5) / 12)
    assert pdms(0, 1, 1, 1, 1) == 0.0 and pdms(1, 0, 1, 1, 1) == 0.0


def test_savgol_is_exact_on_polynomials():
    t = np.arange(50) * DT
    y = 3.0 + 2.0 * t - 1.5 * t**2
    assert np.allclose(savgol(y, 15, 2, 1, DT), 2.0 - 3.0 * t)
    assert np.allclose(savgol(y, 15, 2, 2, DT), -3.0)


def test_perfect_drive_scores_one_and_windows_are_4s():
    score = score_episode(_log(_straight(np.full(201, 20.0))))
    assert score.score == pytest.approx(1.0) and len(score.windows) == 5
    assert [w.start_s for w in score.windows] == [0.0, 4.0, 8.0, 12.0, 16.0]


def test_comfort_flags_harsh_braking_only():
    cruise = comfort_ok(_straight(np.full(80, 15.0)), DT, ScoreConfig())
    assert cruise.all()
    speeds = np.concatenate([np.full(30, 20.0), np.maximum(20.0 - 7.0 * DT * np.arange(1, 51),
                                                          0.0)])
    harsh = score_episode(_log(_straight(speeds)))
    assert min(w.comfort for w in harsh.windows) == 0.0


def test_drivable_area_and_progress_terms():
    ego = _straight(np.full(81, 10.0))
    off = np.ones(81, bool)
    off[50] = False
    score = score_episode(_log(ego, on_drivable=off))
    assert [w.dac for w in score.windows] == [1.0, 0.0]
    assert score.score == pytest.approx(0.5)
    slow = _log(ego, expert_progress=2.0 * np.arange(81) * DT * 10.0)
    assert score_episode(slow).windows[0].ep == pytest.approx(0.5)
    waiting = _log(ego, expert_progress=np.zeros(81))      # the expert stood still
    assert score_episode(waiting).windows[0].ep == 1.0


def test_collisions_at_fault_and_not():
    ego = _straight(np.full(121, 10.0))
    at_fault = score_episode(_log(ego[:51], nominal_steps=120, collision_step=50,
                                  collision_at_fault=True))
    assert [w.nc for w in at_fault.windows] == [1.0, 0.0, 0.0]
    assert at_fault.score == pytest.approx(1.0 / 3.0)
    rear_ended = score_episode(_log(ego[:51], nominal_steps=120, collision_step=50,
                                    collision_at_fault=False))
    assert len(rear_ended.windows) == 2 and rear_ended.score == pytest.approx(1.0)


def test_time_to_collision():
    config = ScoreConfig()
    ego = np.array([0.0, 0.0, 0.0, 10.0])
    ahead_stopped = np.array([[12.0, 0.0, 0.0, 0.0, 5.0, 2.0]])     # gap 7 m at 10 m/s
    far_ahead = np.array([[30.0, 0.0, 0.0, 0.0, 5.0, 2.0]])
    behind_fast = np.array([[-9.0, 0.0, 0.0, 30.0, 5.0, 2.0]])
    next_lane = np.array([[8.0, 4.0, 0.0, 0.0, 5.0, 2.0]])
    crossing = np.array([[12.0, -6.0, math.pi / 2, 6.0, 5.0, 2.0]])      # 27 deg off
    from_the_side = np.array([[10.0, -8.0, math.pi / 2, 8.0, 5.0, 2.0]])  # 39 deg off
    assert ttc_violation(ego, (5.0, 2.0), ahead_stopped, config)
    assert not ttc_violation(ego, (5.0, 2.0), far_ahead, config)
    assert not ttc_violation(ego, (5.0, 2.0), behind_fast, config)
    assert not ttc_violation(ego, (5.0, 2.0), next_lane, config)
    assert ttc_violation(ego, (5.0, 2.0), crossing, config)
    assert not ttc_violation(ego, (5.0, 2.0), from_the_side, config)   # not "ahead"
    standing = np.array([0.0, 0.0, 0.0, 0.1])
    assert not ttc_violation(standing, (5.0, 2.0), ahead_stopped, config)


def test_summary_means():
    good = score_episode(_log(_straight(np.full(41, 10.0))))
    off = score_episode(_log(_straight(np.full(41, 10.0)), on_drivable=np.zeros(41, bool)))
    summary = summarize([good, off])
    assert summary["score"] == pytest.approx(0.5) and summary["terms"]["dac"] == 0.5


def _agent(x: float, y: float, yaw: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(xy=np.array([x, y]), yaw=yaw, length=5.0, width=2.0)


def test_a_collision_is_at_fault_unless_every_touching_vehicle_is_behind():
    """NAVSIM's rule, shared by the closed loop and the candidate oracle: a vehicle ahead or
    beside is the ego's fault; one behind hit the ego; far vehicles do not count."""
    ego = _agent(10.0, 0.0, yaw=math.pi / 2)            # heading +y: "ahead" is +y
    assert struck_at_fault(ego, [_agent(10.0, 5.0)])   # ahead
    assert struck_at_fault(ego, [_agent(12.0, 0.0)])   # beside
    assert not struck_at_fault(ego, [_agent(10.0, -5.0)])           # behind: it hit us
    assert not struck_at_fault(ego, [_agent(10.0, 30.0)])           # not touching
    assert struck_at_fault(ego, [_agent(10.0, -5.0), _agent(12.0, 0.0)])
