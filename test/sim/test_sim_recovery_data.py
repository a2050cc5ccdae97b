"""Recovery data (``wamdiff2 data generate --drive perturbed``) and ``wamdiff2 data merge``."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from wamdiff2_core.geometry import ego_to_map
from wamdiff2_core.sim.episode import EpisodeConfig, run_episode
from wamdiff2_core.sim.frames import map_to_hw
from wamdiff2_core.sim.generator import GeneratorConfig, GeneratorError, generate, merge
from wamdiff2_core.training.data import load_samples

PERTURBED = EpisodeConfig(frames=12, drive="perturbed", perturb_m=1.0, perturb_p=1.0)


def _lane_offset(world, xy: np.ndarray) -> float:
    """Signed distance (m, positive: left) of a map point from its closest lane's centre."""
    network = world.road.network
    hw = map_to_hw(np.asarray(xy, dtype=np.float64))
    lane = network.get_lane(network.get_closest_lane_index(hw))
    return -float(lane.local_coordinates(hw)[1])      # highway-env's lateral grows rightwards


@pytest.fixture(scope="module")
def highway_runs():
    """One highway episode (a straight road) driven by the expert and perturbed."""
    return {drive: run_episode("highway", 11, 0,
                               EpisodeConfig(frames=12) if drive == "expert" else PERTURBED)
            for drive in ("expert", "perturbed")}


def test_perturbed_drive_leaves_the_lane_centre_and_labels_the_way_back(highway_runs):
    world, captures = highway_runs["perturbed"]
    assert len(captures) == 12
    offsets = np.array([_lane_offset(world, c.ego.xy) for c in captures])
    # the expert keeps to the lane centre; the pushed car does not
    _, expert = highway_runs["expert"]
    assert np.abs([_lane_offset(world, c.ego.xy) for c in expert]).max() < 0.2
    off = np.abs(offsets) > 0.3
    assert off.sum() >= 3, offsets
    recovered = 0
    for capture, offset in zip(np.array(captures)[off], offsets[off]):
        ends = ego_to_map(capture.ego_future, capture.ego.xy, capture.ego.yaw)
        end_offset = _lane_offset(world, ends[-1])
        # the label brings the car back towards a lane centre (its own, or the next lane's
        # when the expert changes lanes from there)
        recovered += abs(end_offset) < 0.5 * abs(offset)
    assert recovered >= 0.75 * off.sum()


def test_perturbed_labels_are_the_clean_plan_not_the_driven_future(highway_runs):
    world, captures = highway_runs["perturbed"]
    trace = np.array([state.xy for _, state in world.ego_history])
    differ = 0
    for capture in captures:
        step = capture.step
        driven = trace[step + 5: step + 45: 5]
        label = ego_to_map(capture.ego_future, capture.ego.xy, capture.ego.yaw)
        assert capture.ego_future.shape == (8, 2) and np.isfinite(capture.ego_future).all()
        differ += np.abs(driven - label).max() > 0.3
    assert differ >= len(captures) // 2


def test_perturbed_drive_is_reproducible_and_the_expert_drive_unchanged(highway_runs):
    _, again = run_episode("highway", 11, 0, PERTURBED)
    _, first = highway_runs["perturbed"]
    assert all(np.array_equal(a.ego_future, b.ego_future) and a.command == b.command
               and np.array_equal(a.velocity, b.velocity) for a, b in zip(first, again))
    _, expert = highway_runs["expert"]
    world, _ = highway_runs["expert"]
    trace = np.array([state.xy for _, state in world.ego_history])
    capture = expert[3]
    label = ego_to_map(capture.ego_future, capture.ego.xy, capture.ego.yaw)
    np.testing.assert_allclose(label, trace[capture.step + 5: capture.step + 45: 5], atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [({"drive": "noisy"}, "drive"),
                                           ({"perturb_m": 0.0}, "perturb_m"),
                                           ({"perturb_m": 5.0}, "perturb_m"),
                                           ({"perturb_p": 1.5}, "perturb_p")])
def test_bad_drive_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EpisodeConfig(**kwargs)


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    expert = GeneratorConfig(episodes=1, seed=5, scenarios=("racetrack",),
                             episode=EpisodeConfig(frames=3))
    pushed = GeneratorConfig(episodes=1, seed=5, scenarios=("racetrack",),
                             episode=EpisodeConfig(frames=3, drive="perturbed"))
    generate(root / "expert", expert, progress=False)
    generate(root / "pushed", pushed, progress=False)
    return root


def test_merge_keeps_every_record_with_its_image(two_sets):
    root = two_sets
    counts = merge(root / "both", [root / "expert", root / "pushed"])
    assert counts == {str(root / "expert"): 9, str(root / "pushed"): 9}
    records = json.loads((root / "both" / "train.json").read_text())
    ids = [r["id"] for r in records]
    assert len(set(ids)) == 18 and sum(i.startswith("s1_") for i in ids) == 9
    assert {r["meta"]["source"] for r in records} == {"expert", "pushed"}
    assert (root / "both" / "camera.json").read_bytes() == \
        (root / "expert" / "camera.json").read_bytes()
    # the same frame index of the two sources: the same world seed, other answers and pixels
    samples = {s.id: s for s in load_samples(root / "both")}
    a, b = samples["s0_00000_001_planning"], samples["s1_00000_001_planning"]
    assert a.answer != b.answer and a.images[0] != b.images[0]
    assert open(a.images[0], "rb").read() == \
        (root / "expert" / "images" / "00000_001.png").read_bytes()


def test_merge_refuses_what_it_cannot_do(two_sets, tmp_path):
    root = two_sets
    with pytest.raises(GeneratorError, match="at least two"):
        merge(tmp_path / "one", [root / "expert"])
    with pytest.raises(GeneratorError, match="twice"):
        merge(tmp_path / "dup", [root / "expert", root / "expert"])
    with pytest.raises(GeneratorError, match="no finished"):
        merge(tmp_path / "missing", [root / "expert", tmp_path / "nowhere"])
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.json").write_text("[]\n")
    (other / "camera.json").write_text("{}\n")
    with pytest.raises(GeneratorError, match="camera"):
        merge(tmp_path / "cams", [root / "expert", other])
    assert not (tmp_path / "cams" / "train.json").exists()


def test_merge_command_line(two_sets, tmp_path):
    root = two_sets
    command = [sys.executable, "-m", "wamdiff2_core.cli", "data", "merge", "--out",
               str(tmp_path / "both"), str(root / "expert"), str(root / "pushed")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wrote 18 records" in done.stdout
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "already holds" in again.stderr
