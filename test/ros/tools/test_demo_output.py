"""A second `wamdiff2 demo` replaces the demo's own last output and nothing else (issue 55):
the files its manifest (or an older demo report.json) lists go, anyone else's stop the run
with a sentence naming the file. The live double run: test_bag_demo.py."""
from __future__ import annotations

import json

import pytest

from wamdiff2_ros.tools.bag_io import BagError
from wamdiff2_ros.tools.demo_output import MANIFEST, replace_previous


def _write_run(out, indices) -> None:
    """What a demo run leaves: its manifest, bag, report, frames and log."""
    replace_previous(out, indices)
    (out / "outputs.mcap").write_bytes(b"bag")
    (out / "report.json").write_text("{}")
    (out / "planner_node.log").write_text("log")
    (out / "frames").mkdir()
    for i in indices:
        (out / "frames" / f"frame_{i:04d}.png").write_bytes(b"png")


def test_a_second_run_removes_exactly_the_last_runs_files(tmp_path):
    out = tmp_path / "demo"
    _write_run(out, range(5))
    (out / "notes.txt").write_text("mine")                 # a user's file beside them
    assert replace_previous(out, range(3)) == 7            # bag, report, 5 frames
    assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST, "notes.txt",
                                                            "planner_node.log"])
    assert json.loads((out / MANIFEST).read_text())[:2] == ["outputs.mcap", "report.json"]
    # an interrupted run (its manifest written, nothing else yet) is replaced too
    assert replace_previous(out, range(3)) == 0


def test_anyone_elses_file_in_the_way_stops_the_run_naming_it(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "outputs.mcap").write_bytes(b"someone's bag")   # no manifest: not the demo's
    with pytest.raises(BagError, match="outputs.mcap already exists and is not a previous"):
        replace_previous(out, range(3))
    assert (out / "outputs.mcap").read_bytes() == b"someone's bag"

    out = tmp_path / "demo2"
    _write_run(out, range(3))
    (out / "frames" / "mine.png").write_bytes(b"user")     # beside the demo's frames
    with pytest.raises(BagError, match="frames/mine.png already exists"):
        replace_previous(out, range(3))
    assert len(list((out / "frames").iterdir())) == 4 and (out / "outputs.mcap").exists()


def test_a_manifest_never_names_a_file_outside_the_demos_own(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "planner_node.py").write_text("keep")
    (out / MANIFEST).write_text(json.dumps(["../victim.txt", "planner_node.py",
                                            "report.json"]))
    (out / "report.json").write_text("{}")
    assert replace_previous(out, range(2)) == 1            # report.json only
    assert victim.read_text() == "keep" and (out / "planner_node.py").exists()


def test_an_older_demo_report_stands_in_for_the_manifest(tmp_path):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "frames").mkdir()
    (out / "frames" / "frame_0000.png").write_bytes(b"png")
    (out / "outputs.mcap").write_bytes(b"bag")
    (out / "report.json").write_text(json.dumps({"output_bag": str(out / "outputs.mcap"),
                                                 "per_frame": [{"index": 0}]}))
    assert replace_previous(out, range(1)) == 3
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST]
