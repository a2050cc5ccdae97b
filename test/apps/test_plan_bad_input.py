"""`wamdiff2 plan` on bad input (issue 17, item 7; issue 45): non-finite or implausible ego
motion, a CUDA device on a CPU-only torch, a decompression-bomb image, a truncated image.
One sentence, exit 2, before the model loads; the good input, and motion just inside the
bounds, plan (each run is its own process: a refusal leaves nothing behind to check)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from refusals import assert_one_sentence, run_measured


@pytest.fixture
def camera(tmp_path):
    path = tmp_path / "cam.png"
    Image.fromarray(np.full((36, 64, 3), 90, np.uint8)).save(path)
    return path


def plan(image, *extra: str):
    return run_measured(["plan", "--preset", "tiny", "--block-size", "4", "--steps", "1",
                         "--json", "--image", str(image), *extra])


def test_good_input_and_motion_just_inside_the_bounds_plan(camera):
    for extra in ([], ["--velocity", "69.9", "0", "--acceleration", "-19.9", "0"]):
        got = plan(camera, *extra)
        assert got.rc in (0, 1) and "Traceback" not in got.stderr, got.stderr[-2000:]
        assert "ok" in json.loads(got.stdout)      # a plan, or the model's parse failure


@pytest.mark.parametrize("motion,phrase", [
    (["--velocity", "nan", "inf"], "velocity must be two finite real numbers"),
    (["--acceleration", "0", "inf"], "acceleration must be two finite real numbers"),
    (["--velocity", "-inf", "0"], "velocity must be two finite real numbers"),
])
def test_non_finite_motion(camera, motion, phrase):
    got = plan(camera, *motion)
    assert_one_sentence(got.rc, got.stderr, phrase)
    assert got.seconds < 10, got.seconds


@pytest.mark.parametrize("motion,phrase", [
    (["--velocity", "1e300", "0"], "--velocity: a speed of 1e+300 m/s exceeds the plausible "
                                   "70 m/s"),
    (["--velocity", "50", "-50"], "a speed of 70.7 m/s exceeds"),
    (["--acceleration", "0", "-25"], "--acceleration: an acceleration of 25 m/s^2 exceeds "
                                     "the plausible 20 m/s^2"),
    (["--acceleration", "0", "-1e300"], "--acceleration: an acceleration of 1e+300 m/s^2 "
                                        "exceeds"),
])
def test_implausible_motion_is_refused_as_the_node_refuses_it(camera, motion, phrase):
    """Issue 45: the node's bounds (tasks.motion, the defaults of its max_speed_mps and
    max_accel_mps2) on the command line (a speed just inside them plans: above)."""
    got = plan(camera, *motion)
    assert_one_sentence(got.rc, got.stderr, phrase, "the planning node refuses")
    assert got.seconds < 10, got.seconds


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
@pytest.mark.parametrize("device,phrase", [
    ("cuda", "no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"),
    ("cuda:3", "cuda:3"),
    ("gpu0", "is not a torch device"),
])
def test_unusable_device(camera, device, phrase):
    got = plan(camera, "--device", device)
    assert_one_sentence(got.rc, got.stderr, f"device '{device}'", phrase)


def test_decompression_bomb_and_truncated_image(camera, tmp_path):
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)             # ~20 KB on disk, 144 M pixels
    assert bomb.stat().st_size < 200_000
    got = plan(bomb)
    assert_one_sentence(got.rc, got.stderr, str(bomb), "12000x12000 = 144 M pixels",
                        "limit of 40 M")
    assert got.peak_mb < 1024, got.peak_mb               # it was never decoded
    noisy = tmp_path / "noisy.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (36, 64, 3), np.uint8)).save(noisy)
    cut = tmp_path / "cut.png"
    cut.write_bytes(noisy.read_bytes()[:2000])
    got = plan(cut)
    assert_one_sentence(got.rc, got.stderr, str(cut), "truncated or corrupt")
