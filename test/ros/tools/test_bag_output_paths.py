"""The ROS tools' output paths are checked before work starts (issue 45): `bag record-sim`,
`bag eval` (output bag, report, PNG folder), `demo` and `bench node --json`; a file where a
folder is needed, a folder where a file is needed or a place nothing can be written is one
sentence and exit 2 from the real command line, in seconds, with nothing written."""
from __future__ import annotations

from pathlib import Path

import pytest
from refusals import assert_one_sentence, run_measured

UNWRITABLE = "/proc/wamdiff2-no-such-place"


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return path


def _eval(bag, out, report, *extra) -> list[str]:
    return ["bag", "eval", str(bag), "--checkpoint", "ground-truth", "--out", str(out),
            "--report", str(report), "--no-progress", *extra]


def test_bag_outputs(small_bag, tmp_path, a_file):
    cases = [
        (["bag", "record-sim", "--out", f"{a_file}/x.mcap"],
         f"--out {a_file}/x.mcap cannot be created: {a_file} is a file, not a folder"),
        (["bag", "record-sim", "--out", str(a_file)],            # a rosbag2 folder
         f"--out {a_file} is a file, not a folder"),
        (["bag", "record-sim", "--out", f"{UNWRITABLE}/x.mcap"],
         f"--out {UNWRITABLE}/x.mcap cannot be written (in /proc)"),
        (_eval(small_bag, tmp_path / "o.mcap", tmp_path),
         f"--report {tmp_path} is a folder, not a file"),
        (_eval(small_bag, a_file / "o.mcap", tmp_path / "r.json"),
         f"--out {a_file}/o.mcap cannot be created: {a_file} is a file"),
        (_eval(small_bag, tmp_path / "o.mcap", tmp_path / "r.json", "--frames", str(a_file)),
         f"--frames {a_file} is a file, not a folder"),
        (_eval(small_bag, tmp_path / "o.mcap", f"{UNWRITABLE}/r.json"),
         f"--report {UNWRITABLE}/r.json cannot be written (in /proc)"),
        (["demo", "--out", str(a_file)], f"--out {a_file} is a file, not a folder"),
        (["bench", "node", "--json", str(tmp_path), "--frames", "1"],
         f"--json {tmp_path} is a folder, not a file"),
    ]
    for argv, phrase in cases:
        got = run_measured(argv)
        assert_one_sentence(got.rc, got.stderr, phrase)
        assert got.seconds < 20, (argv, got.seconds)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"], argv
