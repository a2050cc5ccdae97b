"""`wamdiff2 demo`, the README's main-job command: node + replay through DDS + recording +
overlays + latency + open-loop metrics, in one command and under two minutes; a second run
in the same folder runs as the first did."""
from __future__ import annotations

import json
import subprocess
import time

import pytest
from bag_fixtures import WAMDIFF2

from wamdiff2_core.planner import bundled_checkpoint_path
from wamdiff2_ros.tools.bag_io import BagReader
from wamdiff2_ros.tools.bag_layout import OutputTopics

pytestmark = pytest.mark.ros
OUT = OutputTopics()


def _demo(out, ros_domain, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    tic = time.monotonic()
    proc = subprocess.run([WAMDIFF2, "demo", "--out", str(out), "--domain-id", str(ros_domain),
                           *extra], capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - tic
    assert proc.returncode == 0, proc.stderr[-3000:]
    # its own publishers (a latched command) meet the node's subscriptions without a warning
    assert "incompatible QoS" not in proc.stderr, proc.stderr[-3000:]
    return proc, seconds


def test_demo_runs_the_node_on_the_sample_bag_and_reports(tmp_path, ros_domain):
    out = tmp_path / "demo"
    proc, seconds = _demo(out, ros_domain)
    report = json.loads((out / "report.json").read_text())
    counts = report["counts"]
    assert report["frames"] == sum(counts.values()) == 18
    assert counts["not sent"] == 0
    answered = counts["planned"] + counts["no plan"]
    assert answered >= 6, counts              # live at 2 Hz: a slower planner drops some
    assert report["latency_ms"]["count"] == answered
    planning = report["open_loop"]["planning"]
    assert planning["num_records"] == answered
    assert planning["num_parsed"] == counts["planned"]
    if bundled_checkpoint_path() is not None:
        assert counts["planned"] >= 1, counts    # the bundled model plans (most parse)
    if counts["planned"]:
        assert planning["l2_avg_3s"] is not None and planning["collision_rate"] is not None
    with BagReader(out / "outputs.mcap") as bag:
        recorded = {t: info.count for t, info in bag.topics.items()}
    assert recorded[OUT.markers] >= answered and recorded["/diagnostics"] >= 1
    assert recorded.get(OUT.path, 0) >= counts["planned"]
    assert len(list((out / "frames").glob("frame_*.png"))) == 18
    assert "latency (frame published -> answer received)" in proc.stdout
    assert "open loop:" in proc.stdout
    assert seconds < 120, f"the demo took {seconds:.0f} s"

    # A second run in the same folder runs as the first did: it replaces the demo's own
    # last output and leaves a user's file beside it alone.
    (out / "notes.txt").write_text("mine")
    first = (out / "report.json").stat().st_mtime_ns
    proc, _ = _demo(out, ros_domain, "--rate", "4")     # what is replaced, not what is planned
    assert "replaced the previous demo run's output" in proc.stderr, proc.stderr[-3000:]
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "report.json").stat().st_mtime_ns > first
    assert json.loads((out / "report.json").read_text())["frames"] == 18
    assert len(list((out / "frames").glob("frame_*.png"))) == 18
