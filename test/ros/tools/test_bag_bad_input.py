"""`bag eval` on bad input (issue 17, items 7 and 9): a message whose CDR bytes are corrupt, a
symbolic link loop as the bag or output path, a CUDA device on a CPU-only torch; one
sentence, exit 2, nothing written. A SIGKILLed run leaves staged partials that only an
exception handler could have removed: the next run writing the same outputs removes them.
After each refusal the good input evaluates."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from bag_fixtures import WAMDIFF2
from nav_msgs.msg import Odometry
from rclpy.serialization import serialize_message
from refusals import assert_one_sentence

from wamdiff2_core.apps.cli import main
from wamdiff2_ros.tools.bag_io import BagWriter
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS, TYPES
from wamdiff2_ros.tools.bag_record import image_msg

T0 = 1_700_000_000 * 10**9


def eval_argv(bag, out_dir: Path, *extra: str) -> list[str]:
    return ["bag", "eval", str(bag), "--checkpoint", "ground-truth", "--out",
            str(out_dir / "out.mcap"), "--report", str(out_dir / "report.json"),
            "--no-progress", *extra]


def run_cli(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def assert_evaluates(small_bag, out_dir: Path, capsys) -> None:
    """The next good input works: outputs in place, no staging left."""
    code, err = run_cli(eval_argv(small_bag, out_dir), capsys)
    assert code == 0, err
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["out.mcap", "report.json", "report_frames"], names


def corrupt_bag(path: Path, topic: str) -> Path:
    """Three camera frames and odometry, message 1 of ``topic`` with mangled CDR bytes."""
    rgb = np.zeros((36, 64, 3), np.uint8)
    with BagWriter(path) as writer:
        for i in range(3):
            raw = serialize_message(image_msg(rgb, T0 + i * 10**8))
            if topic == SIM_TOPICS.image and i == 1:
                raw = raw[:40] + b"\xff\xff\xff\x7f" + raw[44:200]     # a length past the end
            writer.write(SIM_TOPICS.image, TYPES["image"], T0 + i * 10**8, raw)
            odom = serialize_message(Odometry())
            if topic == SIM_TOPICS.odometry and i == 1:
                odom = odom[:30]
            writer.write(SIM_TOPICS.odometry, TYPES["odometry"], T0 + i * 10**8 + 1, odom)
    return path


@pytest.mark.parametrize("topic,msgtype", [(SIM_TOPICS.image, "sensor_msgs/msg/Image"),
                                           (SIM_TOPICS.odometry, "nav_msgs/msg/Odometry")])
def test_corrupt_cdr(small_bag, tmp_path, capsys, topic, msgtype):
    bag = corrupt_bag(tmp_path / "corrupt.mcap", topic)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, err = run_cli(eval_argv(bag, out_dir), capsys)
    assert_one_sentence(code, err, f"bag {bag} is corrupt", f"message 1 on {topic}",
                        f"not a valid {msgtype}")
    assert sorted(out_dir.iterdir()) == []
    assert_evaluates(small_bag, out_dir, capsys)


def test_symlink_loops(small_bag, tmp_path, capsys):
    loop = tmp_path / "loop.mcap"
    os.symlink(loop.name, loop)                       # loop.mcap -> loop.mcap
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, err = run_cli(eval_argv(loop, out_dir), capsys)
    assert_one_sentence(code, err, f"bag {loop} is a symbolic link loop")
    code, err = run_cli(["bag", "info", str(loop)], capsys)
    assert_one_sentence(code, err, "is a symbolic link loop")
    out_loop = out_dir / "out.mcap"
    os.symlink("out.mcap", out_loop)
    code, err = run_cli(eval_argv(small_bag, out_dir), capsys)
    assert_one_sentence(code, err, f"--out {out_loop} cannot be used: it is a symbolic link "
                                   "loop")
    assert sorted(p.name for p in out_dir.iterdir()) == ["out.mcap"]
    out_loop.unlink()
    assert_evaluates(small_bag, out_dir, capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_cuda_device_without_cuda(small_bag, tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, err = run_cli(eval_argv(small_bag, out_dir, "--device", "cuda"), capsys)
    assert_one_sentence(code, err, "device 'cuda'", "CUDA")
    assert sorted(out_dir.iterdir()) == []
    assert_evaluates(small_bag, out_dir, capsys)


def test_a_constrained_budget_too_small_for_a_plan_is_one_sentence(small_bag, tmp_path,
                                                                    capsys):
    out_dir = tmp_path / "out"
    argv = eval_argv(small_bag, out_dir)
    argv[argv.index("ground-truth")] = "tiny"
    code, err = run_cli([*argv, "--max-new-tokens", "32"], capsys)
    assert_one_sentence(code, err, "max_new_tokens is 32", "--no-constrained")
    assert not out_dir.exists() or sorted(out_dir.iterdir()) == []


def test_partials_of_a_killed_run_are_cleaned_by_the_next(small_bag, tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    argv = eval_argv(small_bag, out_dir)
    argv[argv.index("ground-truth")] = "tiny"             # slow enough to be killed mid-run
    proc = subprocess.Popen([WAMDIFF2, *argv, "--max-new-tokens", "32",
                             "--steps-per-block", "4", "--no-constrained"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    frames = out_dir / f".report_frames.partial-{proc.pid}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (frames.is_dir() and any(frames.iterdir())):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    left = sorted(p.name for p in out_dir.iterdir())
    assert left == [f".out.mcap.partial-{proc.pid}", f".report_frames.partial-{proc.pid}"], \
        left                                              # what SIGKILL leaves behind
    code, err = run_cli(eval_argv(small_bag, out_dir), capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: removed")]
    assert len(notes) == 2 and all("left by an interrupted run" in n for n in notes), err
    assert sorted(p.name for p in out_dir.iterdir()) == ["out.mcap", "report.json",
                                                         "report_frames"]
    # a partial of a process that still runs is never touched
    alive = out_dir / f".other.mcap.partial-{os.getppid()}"
    alive.mkdir()
    code, err = run_cli(eval_argv(small_bag, out_dir, "--out", str(out_dir / "other.mcap"),
                                  "--report", str(out_dir / "r2.json"), "--no-frames"),
                        capsys)
    assert code == 0 and "note: removed" not in err and alive.is_dir(), err


def test_a_checkpoint_with_nan_weights_is_one_sentence(small_bag, tmp_path, capsys):
    """Issue 45: the finite-weights check's CheckpointError reaches `bag eval`'s user as one
    sentence and exit 2 (it was a traceback: the error class was looked up before the model
    module was imported)."""
    from poisoned_weights import poisoned_copy
    from refusals import without_loading_bar

    name = "model.language_model.norm.weight"
    bad = poisoned_copy(tmp_path / "poisoned", {name: float("nan")}, whole=True)
    out_dir = tmp_path / "out"
    argv = eval_argv(small_bag, out_dir)
    argv[argv.index("ground-truth")] = str(bad)
    done = subprocess.run([WAMDIFF2, *argv], capture_output=True, text=True, timeout=300)
    assert_one_sentence(done.returncode, without_loading_bar(done.stderr),
                        "non-finite weights", name)
    assert not out_dir.exists() or sorted(out_dir.iterdir()) == []

