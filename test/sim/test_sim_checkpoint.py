"""`--planner checkpoint:...` drives through the real Planner (tiny preset, CPU)."""
from __future__ import annotations

from wamdiff2_core.evaluation.closed_loop_report import build_report
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
from wamdiff2_core.sim.planners import make_planner


def test_checkpoint_planner_runs_and_failures_are_handled():
    # the untrained tiny preset answers with garbage: the parse failure must be counted
    # and the ego must fall back, not crash the run; one planner call keeps this quick
    from wamdiff2_core.decoding.config import DecodeConfig

    planner = make_planner("checkpoint:tiny", DecodeConfig(commit_rule="low_confidence_budget",
                                                          steps_per_block=8))
    config = ClosedLoopConfig(episodes=1, seed=1000, scenarios=("highway",), duration_s=1.0,
                              replan_interval_s=1.0)
    (result,) = run_closed_loop(planner, config, progress=False)
    report = build_report([result], "checkpoint:tiny", config, 0.0)
    assert report["planner_calls"] == 1
    assert result.stats.plans + result.stats.parse_failures + result.stats.invalid_plans == 1
    if result.stats.plans == 0:
        assert result.stats.brake_fallbacks == 1
    assert len(result.log.ego) == 11 and result.log.collision_step is None
