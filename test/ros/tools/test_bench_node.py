"""`wamdiff2 bench node`: both latencies from one run, as a table and as JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ros_harness import domain_id

from wamdiff2_core.apps.cli import main
from wamdiff2_ros.node.dds import FAST_DDS_VARIABLES

pytestmark = pytest.mark.ros
DDS_VARIABLES = ("RMW_IMPLEMENTATION", *FAST_DDS_VARIABLES)


def test_bench_node_reports_node_and_bare_planner_latency(tmp_path, request):
    out = tmp_path / "bench.json"
    exe = Path(sys.executable).parent / "wamdiff2"
    proc = subprocess.run(
        [str(exe), "bench", "node", "--preset", "tiny", "--max-new-tokens", "32", "--steps",
         "4", "--no-constrained", "--frames", "3", "--domain-id", str(domain_id(request.node.nodeid)),
         "--json", str(out)], capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k not in DDS_VARIABLES})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bare Planner.plan()" in proc.stdout and "node: image -> Path" in proc.stdout
    # the node runs as the launch file starts it: under the package's Fast DDS profile
    assert "node: rmw_fastrtps_cpp with the package's profile" in proc.stdout, proc.stdout
    # the header says the rule both decode with: resolved (a step budget was chosen, so the
    # preset's recommendation does not apply: low_confidence_dynamic at 0.9)
    assert "decoding with low_confidence_dynamic at 0.9, steps: 4" in proc.stdout, proc.stdout
    summary = json.loads(out.read_text())
    assert summary["planner_ms"]["n"] == 3 and summary["planner_ms"]["p50"] > 0
    assert summary["node_image_to_markers_ms"]["n"] == 3
    node = summary["node_image_to_markers_ms"]
    assert 0 < node["p50"] <= node["p95"]
    # The untrained preset never answers with waypoints: no Path, and the table says why.
    assert summary["node_image_to_path_ms"]["n"] == 0
    assert summary["planner_parse_failures"] == 3
    assert "no Path came from the model" in proc.stdout


@pytest.mark.parametrize("argv,message", [
    (["--preset", "tiny", "--frames", "0"], "--frames"),
    (["--preset", "tiny", "--size", "640by360"], "--size"),
    (["--preset", "tiny", "--threshold", "0"], "threshold"),
    # a constrained plan does not fit 32 tokens: the sentence says what to change
    (["--preset", "tiny", "--frames", "1", "--max-new-tokens", "32"], "--no-constrained"),
])
def test_bench_node_user_errors_exit_2(argv, message, capsys):
    assert main(["bench", "node", *argv]) == 2
    assert message in capsys.readouterr().err
