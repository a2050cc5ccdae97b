"""A full disk (issue 17, item 7): `bag eval` and `data generate` stop with one sentence and
exit 1, leave nothing half-written, and continue once there is space (`train`:
test/training/test_train_disk_full.py).

The disk is a real one: a tmpfs of a few KB or MB mounted in a private mount namespace
(test/helpers/tiny_disk.py), so writes fail with ENOSPC from the kernel, through every
library in the way (safetensors, PIL, rosbags, json)."""
from __future__ import annotations

import subprocess

import pytest
from refusals import WAMDIFF2, assert_one_sentence
from tiny_disk import list_files_script, results, run_on_tiny_disk, sh, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def test_bag_eval_on_a_full_disk(tmp_path):
    from wamdiff2_ros.tools.demo import SAMPLE_BAG

    disk = tmp_path / "disk"
    disk.mkdir()
    base = [WAMDIFF2, "bag", "eval", SAMPLE_BAG, "--checkpoint", "ground-truth",
            "--no-progress", "--out", disk / "o.mcap", "--report", disk / "r.json"]
    script = (f"{sh(base)} > /dev/null 2> {tmp_path}/err1; echo rc1=$?\n"
              + list_files_script(disk, "left1")
              + "remount 12k\n"                              # the bag or the report
              + f"{sh(base + ['--no-frames'])} > /dev/null 2> {tmp_path}/err2; echo rc2=$?\n"
              + list_files_script(disk, "left2")
              + "remount 64m\n"
              + f"{sh(base)} > /dev/null 2> {tmp_path}/err3; echo rc3=$?\n"
              + list_files_script(disk, "left3"))
    done = run_on_tiny_disk(script, str(disk), "192k")   # 18 overlay PNGs do not fit
    got = results(done.stdout)
    for run in ("1", "2"):
        assert got.get(f"rc{run}") == "1", done.stdout + done.stderr
        err = (tmp_path / f"err{run}").read_text()
        assert_one_sentence(1, err, "no space left on device", "nothing half-written",
                            code=1)
        assert got[f"left{run}"] == "", got                 # no bag, report, frames, partials
    assert got.get("rc3") == "0", (tmp_path / "err3").read_text()
    assert got["left3"].split()[:3] == ["./o.mcap", "./r.json", "./r_frames"]


def test_data_generate_on_a_full_disk_then_resume_gives_the_same_bytes(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    args = ["data", "generate", "--episodes", "2", "--frames", "4", "--seed", "5",
            "--scenarios", "highway", "--no-progress"]
    script = (f"{sh([WAMDIFF2, *args, '--out', disk / 'd'])} > /dev/null "
              f"2> {tmp_path}/err1; echo rc1=$?\n"
              + list_files_script(disk / "d", "left1")
              + "remount 64m\n"
              + f"{sh([WAMDIFF2, *args, '--out', disk / 'd', '--resume'])} > /dev/null "
                f"2> {tmp_path}/err2; echo rc2=$?\n"
              + f"cp -a {disk}/d {tmp_path}/resumed\n")
    done = run_on_tiny_disk(script, str(disk), "20k")    # 5 pages: the 4th PNG fails
    got = results(done.stdout)
    assert got.get("rc1") == "1", done.stdout + done.stderr
    assert_one_sentence(1, (tmp_path / "err1").read_text(), "no space left on device",
                        "--resume continues with the unfinished episodes", code=1)
    left = got["left1"].split()
    assert "./progress.json" in left and "./train.json" not in left, left
    assert not any(p.endswith(".tmp") for p in left), left
    assert got.get("rc2") == "0", (tmp_path / "err2").read_text()
    subprocess.run([WAMDIFF2, *args, "--out", str(tmp_path / "whole")], check=True,
                   capture_output=True, timeout=300)
    files = {p.relative_to(tmp_path / "whole"): p.read_bytes()
             for p in sorted((tmp_path / "whole").rglob("*")) if p.is_file()}
    resumed = {p.relative_to(tmp_path / "resumed"): p.read_bytes()
               for p in sorted((tmp_path / "resumed").rglob("*")) if p.is_file()}
    assert resumed.keys() == files.keys() and resumed == files
