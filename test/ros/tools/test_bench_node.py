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


def test_bench_node_with_a_question_load_reports_both_phases(tmp_path, request):
    """--question-rate: the same frames without and then with a question every 100 ms; each
    phase's Paths per frame (every Path counted by stamp, with its source) and frame -> Path
    p50/p99/max, the questions' fate, and the p99 ratio."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "wamdiff2"), "bench", "node", "--preset", "tiny",
         "--max-new-tokens", "32", "--steps", "4", "--no-constrained", "--frames", "3",
         "--question-rate", "10", "--domain-id", str(domain_id(request.node.nodeid)),
         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(out.read_text())
    assert list(summary["phases"]) == ["no questions", "questions at 10 Hz"]
    for name, phase in summary["phases"].items():
        assert phase["frames"] == 3, (name, phase)
        # every frame was waited for: at least one Path each, and never two for one frame
        assert phase["paths_per_frame"] == 1.0 and phase["frames_without_path"] == 0, phase
        # the untrained preset never parses: each Path is a named fallback, none the model's
        assert sum(phase["path_sources"].values()) == 3, phase
        assert set(phase["path_sources"]) <= {"last_plan", "stop"}, phase
        latency = phase["frame_to_path_ms"]
        assert latency["n"] == 3 and 0 < latency["p50"] <= latency["p99"] <= latency["max"]
    questions = summary["phases"]["questions at 10 Hz"]["questions"]
    assert questions["sent"] > 0 and questions["answered"] + questions["refused"] > 0
    assert questions["answered"] + questions["refused"] <= questions["sent"]
    assert "questions" not in summary["phases"]["no questions"]
    assert summary["p99_with_questions_over_without"] > 0
    assert "p99 with questions / p99 without:" in proc.stdout, proc.stdout
    assert "questions at 10 Hz" in proc.stdout and "Paths/frame" in proc.stdout


@pytest.mark.parametrize("argv,message", [
    (["--preset", "tiny", "--frames", "0"], "--frames"),
    (["--preset", "tiny", "--size", "640by360"], "--size"),
    (["--preset", "tiny", "--threshold", "0"], "threshold"),
    (["--preset", "tiny", "--question-rate", "-1"], "--question-rate"),
    (["--preset", "tiny", "--question-rate", "nan"], "--question-rate"),
    (["--preset", "tiny", "--side-delay-ms", "5000"], "--side-delay-ms"),
    # a constrained plan does not fit 32 tokens: the sentence says what to change
    (["--preset", "tiny", "--frames", "1", "--max-new-tokens", "32"], "--no-constrained"),
])
def test_bench_node_user_errors_exit_2(argv, message, capsys):
    assert main(["bench", "node", *argv]) == 2
    assert message in capsys.readouterr().err
