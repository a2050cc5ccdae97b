"""`eval closed-loop --through-node`: the bundled model drives through the real planner_node
over DDS while the world moves on; the report's timing fields; a node that crashes, hangs or
is slow to start fails its episode and the run goes on; every process is stopped."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from ros_harness import domain_id

from wamdiff2_core.apps.cli import main
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
from wamdiff2_core.types import bundled_checkpoint_path
from wamdiff2_ros.tools.closed_loop_node import NodeSource, NodeSourceConfig

pytestmark = pytest.mark.ros
BUNDLED = bundled_checkpoint_path()
needs_model = pytest.mark.skipif(BUNDLED is None, reason="this checkout has no bundled model")
# the fast planning setting: fewer unparsed plans from the bundled model, and faster ones
FAST_PLANS = ["--commit-rule", "low_confidence_leftmost", "--steps-per-block", "8",
              "--threshold", "0.95"]


def _node_processes(domain: int) -> list[int]:
    """Pids of live planner_node processes on ROS domain ``domain`` (from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if (b"planner_node" in cmdline and f"ROS_DOMAIN_ID={domain}".encode() in environ
                and state != "Z"):
            pids.append(int(entry.name))
    return pids


@needs_model
def test_the_bundled_model_drives_through_the_node_in_real_time(tmp_path, request):
    domain = domain_id(request.node.nodeid)
    out = tmp_path / "cl"
    code = main(["eval", "closed-loop", "--planner", f"checkpoint:{BUNDLED}", "--through-node",
                 "--episodes", "1", "--scenarios", "highway", "--duration", "4",
                 "--domain-id", str(domain), "--out", str(out), "--no-progress",
                 "--max-plots", "1", *FAST_PLANS])
    assert code == 0
    report = json.loads((out / "closed_loop.json").read_text())
    assert report["driver"] == "node" and report["time_mode"] == "realtime"
    assert report["node"]["ros_domain_id"] == domain and report["node"]["node_starts"] == 1
    assert report["failed_episodes"] == [] and report["valid_plans"] >= 2
    assert report["node"]["overrides"]["decode.commit_rule"] == "low_confidence_leftmost"
    timing = report["latency"]
    lat, age = timing["latency_ms"], timing["plan_age_s"]
    # every valid plan but the warm start's (the world waited for the first frame's plan)
    assert report["valid_plans"] - 1 <= lat["n"] < report["valid_plans"] + 1
    assert 0 < lat["p50"] <= lat["p95"] <= lat["max"]
    assert 0 < age["p50"] <= age["p95"] and timing["frames"] == 8
    assert 0 <= timing["frames_without_new_plan"] <= timing["frames"]
    assert timing["plans_per_s"] == pytest.approx(report["valid_plans"] / 4.0, abs=0.01)
    (episode,) = report["episodes"]
    assert episode["windows"] and 0 <= episode["score"] <= 1 and episode["failure"] is None
    assert episode["latency_ms"] == lat
    for name in ("closed_loop.txt", "scores.png", "timing.png", "planner_node_1.log"):
        assert (out / name).is_file()
    assert "time realtime, plans node: latency p50/p95" in (out / "closed_loop.txt").read_text()
    assert _node_processes(domain) == []                    # every process stopped


class _Sabotage(NodeSource):
    """A node source whose node, after its first answer of an episode, is killed (episode
    0) or stopped so that it never answers again (episode 1)."""

    def begin_episode(self, index, scenario, seed):
        self.episode = index
        super().begin_episode(index, scenario, seed)

    def plan(self, frame, start_s):
        outcome = super().plan(frame, start_s)
        proc = self.process.proc
        if self.episode == 0:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        elif self.episode == 1:
            os.killpg(proc.pid, signal.SIGSTOP)
        return outcome


@needs_model
@pytest.mark.slow          # three node starts: about 2.5 minutes on the 2-core machine
def test_a_node_that_crashes_or_hangs_fails_its_episode_and_the_run_goes_on(tmp_path,
                                                                             request):
    domain = domain_id(request.node.nodeid)
    source = _Sabotage(NodeSourceConfig({"checkpoint": str(BUNDLED), "tasks": ["planning"]},
                                        domain_id=domain, answer_timeout_s=5.0,
                                        log_dir=tmp_path))
    config = ClosedLoopConfig(episodes=3, seed=1000, scenarios=("highway",), duration_s=2.0)
    try:
        results = run_closed_loop(source, config, progress=False)
        starts = source.starts
    finally:
        source.close()
    crashed, hung, fine = results
    assert "planner_node exited with code -9" in crashed.failure
    assert "no answer from planner_node within 5 s" in hung.failure
    assert crashed.score.score == hung.score.score == 0.0 and crashed.stats.plans == 1
    assert fine.failure is None and fine.stats.plans == 4          # a fresh node answered
    assert starts == 3 and _node_processes(domain) == []


def test_a_node_slower_to_start_than_allowed_fails_the_episode(tmp_path, request):
    domain = domain_id(request.node.nodeid)
    source = NodeSource(NodeSourceConfig({"checkpoint": "tiny"}, domain_id=domain,
                                         start_timeout_s=0.5, log_dir=tmp_path))
    config = ClosedLoopConfig(episodes=1, seed=1000, scenarios=("highway",), duration_s=1.0,
                              time_mode="realtime")
    try:
        (result,) = run_closed_loop(source, config, progress=False)
    finally:
        source.close()
    assert "did not come up within 0.5 s" in result.failure and result.score.score == 0.0
    time.sleep(0.5)
    assert _node_processes(domain) == []


@pytest.mark.parametrize("argv,message", [
    (["--planner", "expert", "--through-node"], "plans with a model"),
    (["--planner", "checkpoint:tiny", "--through-node", "--node-param", "nocolon"],
     "NAME:=VALUE"),
    (["--planner", "checkpoint:tiny", "--through-node", "--domain-id", "300"], "--domain-id"),
    (["--planner", "checkpoint:tiny", "--through-node", "--workers", "2"], "leave --workers out"),
    (["--planner", "expert", "--time", "realtime"], "--through-node"),
    (["--planner", "expert", "--latency", "h200"], "applies to --time latency-model"),
    (["--planner", "expert", "--time", "latency-model"], "fixed:MS"),
    (["--planner", "expert", "--camera-rate", "3"], "whole number"),
    (["--planner", "expert", "--time", "warp"], "unknown time mode"),
])
def test_closed_loop_timing_user_errors_exit_2(argv, message, capsys, tmp_path):
    assert main(["eval", "closed-loop", *argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
