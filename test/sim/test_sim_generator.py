"""`data generate`: contract layout, determinism (same bytes), resume, speed."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wamdiff2_core import tasks
from wamdiff2_core.sim import generator
from wamdiff2_core.sim.camera import CameraConfig
from wamdiff2_core.sim.episode import EpisodeConfig
from wamdiff2_core.sim.generator import (GeneratorConfig, GeneratorError, generate)

# 20 frames: 2 episodes x 10 frames, two scenario families
CONFIG = GeneratorConfig(episodes=2, seed=3, scenarios=("highway", "intersection"),
                         episode=EpisodeConfig(frames=10))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "run"
    start = time.perf_counter()
    summary = generate(out, CONFIG, progress=False)
    return out, summary, time.perf_counter() - start


def test_twenty_frames_give_a_record_per_task_each(first_run):
    out, summary, _ = first_run
    assert summary.frames == 20 and summary.records == {"planning": 20, "detection": 20,
                                                        "qa": 20}


def test_same_arguments_same_bytes(first_run, tmp_path):
    out, _, _ = first_run
    generate(tmp_path / "again", CONFIG, progress=False)
    a, b = _files(out), _files(tmp_path / "again")
    assert sorted(a) == sorted(b) and len(a) == 20 + 2
    assert all(a[name] == b[name] for name in a)


def test_layout_and_meta_follow_the_contract(first_run):
    out, _, _ = first_run
    assert sorted(p.name for p in out.iterdir()) == ["camera.json", "images", "train.json"]
    camera = json.loads((out / "camera.json").read_text())
    assert {"width", "height", "fx", "fy", "cx", "cy", "mount"} <= set(camera)
    records = json.loads((out / "train.json").read_text())
    assert [r["id"] for r in records] == sorted(r["id"] for r in records)
    for record in records:
        meta = record["meta"]
        assert {"episode", "frame", "scenario", "seed", "image_size"} <= set(meta)
        assert meta["image_size"] == [camera["width"], camera["height"]]
        image = out / record["image"][0]
        assert record["image"][0] == f"images/{meta['episode']:05d}_{meta['frame']:03d}.png"
        assert Image.open(image).size == (camera["width"], camera["height"])
        prompt, answer = tasks.record_prompt_and_answer(record)
        assert prompt.count("<image>") == 1
        if record["task"] == "planning":
            assert meta["command"] in tasks.COMMANDS
            assert f"navigation information is: {meta['command']}" in prompt
            future = np.array(meta["ego_future"])
            assert future.shape == (8, 2)
            assert np.allclose(tasks.parse_waypoints(answer), future, atol=0.006)
            assert len(meta["velocity"]) == 2 and len(meta["acceleration"]) == 2
            assert meta["ego_size"] == [5.0, 2.0]
            for other in meta["others_future"]:
                assert {"id", "size", "poses"} == set(other)
                assert np.array(other["poses"]).shape == (8, 3)
        elif record["task"] == "detection":
            parsed = tasks.parse_detections(answer, *meta["image_size"])
            assert len(parsed) == len(meta["boxes"])
            for box in meta["boxes"]:
                x1, y1, x2, y2 = box["bbox"]
                assert 0 <= x1 < x2 <= camera["width"] and 0 <= y1 < y2 <= camera["height"]
                assert box["label"] == "car" and isinstance(box["id"], int)
        else:
            assert meta["answer"] == answer and meta["answer"] in meta["answer_set"]
            assert meta["question"] in prompt


def test_expert_future_matches_the_reported_velocity(first_run):
    out, _, _ = first_run
    records = json.loads((out / "train.json").read_text())
    for record in (r for r in records if r["task"] == "planning"):
        first = np.array(record["meta"]["ego_future"][0])
        vx = record["meta"]["velocity"][0]
        # the first waypoint is about half a second of travel ahead
        assert first[0] == pytest.approx(0.5 * vx, abs=0.5 + 0.1 * abs(vx))


def test_interrupted_run_resumes_to_the_same_bytes(first_run, tmp_path, monkeypatch):
    out, _, _ = first_run
    target = tmp_path / "resumed"
    real = generator.generate_episode
    calls = []

    def interrupt_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(generator, "generate_episode", interrupt_on_second)
    with pytest.raises(KeyboardInterrupt):
        generate(target, CONFIG, progress=False)
    monkeypatch.setattr(generator, "generate_episode", real)
    assert (target / "progress.json").exists() and not (target / "train.json").exists()
    assert not list(target.rglob("*.tmp"))
    with pytest.raises(GeneratorError, match="--resume"):
        generate(target, CONFIG, progress=False)
    other = GeneratorConfig(episodes=2, seed=4, scenarios=CONFIG.scenarios,
                            episode=CONFIG.episode)
    with pytest.raises(GeneratorError, match="other arguments"):
        generate(target, other, resume=True, progress=False)
    summary = generate(target, CONFIG, resume=True, progress=False)
    assert summary.resumed_episodes == 1
    assert _files(target) == _files(out)
    with pytest.raises(GeneratorError, match="finished"):
        generate(target, CONFIG, progress=False)


def test_tasks_and_resolution_options(tmp_path):
    config = GeneratorConfig(episodes=1, seed=0, tasks=("detection",), scenarios=("racetrack",),
                             episode=EpisodeConfig(frames=2, camera=CameraConfig(
                                 width=160, height=96)))
    generate(tmp_path / "small", config, progress=False)
    records = json.loads((tmp_path / "small" / "train.json").read_text())
    assert [r["task"] for r in records] == ["detection", "detection"]
    assert records[0]["meta"]["image_size"] == [160, 96]
    assert Image.open(tmp_path / "small" / records[0]["image"][0]).size == (160, 96)
    with pytest.raises(ValueError):
        GeneratorConfig(episodes=1, tasks=("planning", "driving"))


def test_another_process_writes_the_same_bytes(first_run, tmp_path):
    out, _, _ = first_run
    target = tmp_path / "cli"
    subprocess.run([sys.executable, "-m", "wamdiff2_core.cli", "data", "generate", "--out",
                    str(target), "--episodes", "2", "--frames", "10", "--seed", "3",
                    "--scenarios", "highway,intersection", "--no-progress"],
                   check=True, capture_output=True, timeout=120)
    assert _files(target) == _files(out)
