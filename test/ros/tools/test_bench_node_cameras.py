"""`wamdiff2 bench node --cameras`: the node and the bare planner timed on a camera rig, each
frame one image per camera (the figures of one, two and three cameras come from it)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ros_harness import domain_id

pytestmark = pytest.mark.ros


def test_bench_node_times_a_rig_and_says_how_long_the_prompt_is(tmp_path, request):
    from wamdiff2_core import tasks
    from wamdiff2_core.planner import Planner

    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "wamdiff2"), "bench", "node", "--preset", "tiny",
         "--max-new-tokens", "32", "--steps", "4", "--no-constrained", "--frames", "2",
         "--size", "320x180", "--cameras", "front,left", "--domain-id",
         str(domain_id(request.node.nodeid)), "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(out.read_text())
    assert summary["cameras"] == ["front", "left"] and summary["weights_for_other_cameras"]
    assert summary["planner_ms"]["n"] == 2 and summary["node_image_to_markers_ms"]["n"] == 2
    assert "cameras: front, left (2); planning prompt" in proc.stdout, proc.stdout
    # the prompt grew by the second camera's image tokens (and its name's line)
    one = Planner.from_pretrained("tiny")
    image = np.zeros((180, 320, 3), np.uint8)
    single = one.model.processor.encode_prompts([tasks.planning_prompt("straight")], [[image]])
    image_tokens = int((single["input_ids"] == one.model.processor.image_pad_id).sum())
    assert summary["prompt_tokens"] > single["input_ids"].shape[1] + image_tokens


def test_bench_node_refuses_a_bad_rig_with_a_sentence():
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "wamdiff2"), "bench", "node", "--preset", "tiny",
         "--cameras", "front,sky"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not among the standard cameras" in proc.stderr
