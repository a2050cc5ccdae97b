"""`wamdiff2 bench dds`: small frames to a subscriber in a child process, counted, under Fast
DDS's defaults and with the node's profile on the subscriber."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ros_harness import domain_id

from wamdiff2_ros.node.dds import FAST_DDS_VARIABLES

pytestmark = pytest.mark.ros
REPO = Path(__file__).resolve().parents[3]
WAMDIFF2 = str(Path(sys.executable).parent / "wamdiff2")


def _bench_dds(request, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RMW_IMPLEMENTATION", *FAST_DDS_VARIABLES)}
    return subprocess.run(
        [WAMDIFF2, "bench", "dds", "--size", "64x36", "--rate", "5", "--frames", "8",
         "--settle-s", "0.5", "--domain-id", str(domain_id(request.node.nodeid)), *args],
        cwd=REPO, capture_output=True, text=True, timeout=180, env=env)


def test_bench_dds_counts_every_reliable_frame(tmp_path, request):
    # 5 Hz: the depth-1 reader keeps up under CI load, so a frame missing is delivery's fault
    out = tmp_path / "dds.json"
    proc = _bench_dds(request, "--sub-qos", "reliable", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "64x36 @ 5 Hz, reliable -> reliable: 8/8 delivered" in proc.stdout, proc.stdout
    assert "Fast DDS defaults" in proc.stdout
    summary = json.loads(out.read_text())
    assert summary["sent"] == summary["received"] == 8 and summary["env"] == {}
    assert 0 < summary["latency_p50_ms"] <= summary["latency_p95_ms"]


def test_bench_dds_gives_the_subscriber_its_own_profile(request):
    # the node's profile on the receiving side only, as the launch file gives it the node
    proc = _bench_dds(request, "--sub-profile", "config/fastdds_node.xml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reliable -> best_effort: " in proc.stdout
    assert "subscriber profile config/fastdds_node.xml" in proc.stdout
    received = int(proc.stdout.split(" delivered")[0].rsplit(" ", 1)[1].split("/")[0])
    assert 0 < received <= 8        # best effort may drop frames, and never invents one


@pytest.mark.parametrize("args, message", [
    (["--frames", "0"], "--frames"),
    (["--sub-profile", "no/such.xml"], "is not a file"),
    (["--size", "64"], "--size"),
])
def test_bench_dds_user_errors_exit_2(request, args, message):
    proc = _bench_dds(request, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
