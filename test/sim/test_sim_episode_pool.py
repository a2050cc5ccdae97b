"""Episodes over worker processes: the same per-episode results for 1 and 2 workers, in any
order, as the serial closed loop; planners that cannot be built say why."""
from __future__ import annotations

import json

import pytest

from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
from wamdiff2_core.sim.episode_pool import (PlannerBuildError, PlannerRecipe, drive,
                                            run_episodes)
from wamdiff2_core.sim.planners import make_planner
from wamdiff2_core.types import bundled_checkpoint_path

BUNDLE = f"checkpoint:{bundled_checkpoint_path()}"
# short episodes of two scenario families: a few plans each
CONFIG = ClosedLoopConfig(episodes=3, seed=7300, duration_s=3.0,
                          scenarios=("intersection", "highway"))


def _episodes(results) -> list[str]:
    """Everything an episode reports but its planner's wall-clock compute times."""
    out = []
    for result in results:
        item = result.to_json()
        item.pop("latency_ms", None)
        out.append(json.dumps(item, sort_keys=True))
    return out


@pytest.fixture(scope="module")
def bundle_one_worker():
    results, log = drive(PlannerRecipe(BUNDLE), CONFIG, workers=1, progress=False)
    return results


def test_two_workers_drive_the_same_episodes_as_one(bundle_one_worker):
    two, log = drive(PlannerRecipe(BUNDLE), CONFIG, workers=2, progress=False)
    assert log is None
    assert [r.index for r in two] == [0, 1, 2]
    assert _episodes(two) == _episodes(bundle_one_worker)
    assert [r.log.ego.tolist() for r in two] == [r.log.ego.tolist()
                                                 for r in bundle_one_worker]
    # the planner really drove: it planned every frame and did not all end the same way
    assert all(r.stats.plans > 0 and r.stats.parse_failures == 0 for r in two)


def test_episode_order_does_not_change_an_episode(bundle_one_worker):
    recipes = {"a": PlannerRecipe(BUNDLE)}
    backwards = list(run_episodes(recipes, CONFIG, [("a", 2), ("a", 0)], workers=1))
    assert [run.result.index for run in backwards] == [2, 0]
    by_index = {run.result.index: run.result for run in backwards}
    assert _episodes([by_index[0], by_index[2]]) == _episodes(
        [bundle_one_worker[0], bundle_one_worker[2]])


def test_pool_matches_the_serial_closed_loop():
    serial = run_closed_loop(make_planner("constant-velocity"), CONFIG, progress=False)
    pooled, _ = drive(PlannerRecipe("constant-velocity"), CONFIG, workers=2, progress=False)
    assert _episodes(pooled) == _episodes(serial)


def test_candidates_log_their_frames_in_episode_order():
    from wamdiff2_core.candidates.config import CandidateConfig

    config = ClosedLoopConfig(episodes=2, seed=7300, duration_s=1.0)
    recipe = PlannerRecipe(BUNDLE, candidates=CandidateConfig(k=2))
    one, log_one = drive(recipe, config, workers=1, progress=False)
    two, log_two = drive(recipe, config, workers=2, progress=False)
    assert _episodes(one) == _episodes(two)
    assert len(log_one.frames) == sum(r.stats.frames for r in one) > 0
    assert [f["candidates"] for f in log_one.frames] == [f["candidates"]
                                                         for f in log_two.frames]


@pytest.mark.parametrize("recipe, reason", [
    (PlannerRecipe("no-such-planner"), "unknown planner"),
    (PlannerRecipe("checkpoint:/nonexistent/model"), "cannot load planner"),
])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_planner_that_cannot_be_built_says_why(recipe, reason, workers):
    config = ClosedLoopConfig(episodes=2, seed=7300, duration_s=1.0)
    with pytest.raises(PlannerBuildError, match=reason):
        drive(recipe, config, workers=workers, progress=False)


def test_bad_worker_counts_are_refused():
    with pytest.raises(ValueError, match="workers must be at least 1"):
        list(run_episodes({"a": PlannerRecipe("expert")}, CONFIG, [("a", 0)], workers=0))
    with pytest.raises(ValueError, match="unknown planners"):
        list(run_episodes({"a": PlannerRecipe("expert")}, CONFIG, [("b", 0)]))


def test_ctrl_c_stops_the_pool_at_once_with_one_line_and_no_worker_left(tmp_path):
    """Ctrl-C reaches the terminal's whole process group: the parent stops the pool and says
    so in one line; the workers, which ignore it, print no tracebacks and are gone after."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from processes import descendants

    argv = [sys.executable, "-m", "wamdiff2_core.apps.cli", "eval", "compare", "--a", "expert",
            "--b", "constant-velocity", "--episodes", "8", "--workers", "2", "--no-progress",
            "--out", str(tmp_path)]
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL),
                                               os.setsid()))
    def ignores_sigint(pid: int) -> bool:
        status = open(f"/proc/{pid}/status").read()
        return bool(int(status.split("SigIgn:")[1].split()[0], 16) & 1 << signal.SIGINT - 1)

    def started_workers() -> list[int]:       # the pool's workers, past their initializer
        found = []
        for pid in descendants(job.pid):
            try:
                cmdline = open(f"/proc/{pid}/cmdline").read()
                if "spawn_main" in cmdline and ignores_sigint(pid):
                    found.append(pid)
            except (OSError, IndexError):
                pass
        return found

    try:
        deadline = time.monotonic() + 60
        while len(started_workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = started_workers()
        assert len(workers) == 2, "the pool's workers do not ignore Ctrl-C"
        time.sleep(2.0)                                         # inside an episode
        os.killpg(job.pid, signal.SIGINT)
        out, _ = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 130, out
    assert "interrupted" in out
    assert not any(word in out for word in ("Traceback", "KeyboardInterrupt", "PoolWorker"))
    time.sleep(0.5)
    assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}")
                and "Z" not in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[:1]]
