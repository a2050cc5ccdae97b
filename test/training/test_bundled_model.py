"""The bundled default model: small enough to ship, block 32, and it plans, detects and
answers on simulator frames it never saw (a fresh episode of the real generator)."""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wamdiff2_core.planner import Observation, Planner, bundled_checkpoint_path

BUNDLED = bundled_checkpoint_path()
pytestmark = pytest.mark.skipif(BUNDLED is None, reason="this checkout has no bundled model")


@pytest.fixture(scope="module")
def planner():
    return Planner.from_pretrained()


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """Records of one simulated episode with a seed the training data did not use."""
    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, generate

    out = tmp_path_factory.mktemp("sim")
    generate(out, GeneratorConfig(episodes=1, seed=4242, episode=EpisodeConfig(frames=3)),
             progress=False)
    records = json.loads((out / "train.json").read_text())
    return out, records


def _image(root: Path, record: dict) -> Image.Image:
    return Image.open(root / record["image"][0]).convert("RGB")


def test_bundle_is_a_small_block_32_diffusion_checkpoint():
    size = sum(p.stat().st_size for p in BUNDLED.rglob("*") if p.is_file())
    assert size <= 25 * 2 ** 20, f"{size / 2 ** 20:.1f} MB"
    fields = json.loads((BUNDLED / "config.json").read_text())["wamdiff2"]
    assert fields["paradigm"] == "diffusion" and fields["block_size"] == 32
    assert not [p for p in BUNDLED.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    assert "wamdiff2 pipeline" in (BUNDLED / "README.md").read_text()


def test_plans_on_simulator_frames_are_parseable_and_plausible(planner, frames):
    root, records = frames
    plans = [r for r in records if r["task"] == "planning"]
    assert plans
    for record in plans:
        meta = record["meta"]
        obs = Observation(images=[_image(root, record)], command=meta["command"],
                          velocity=tuple(meta["velocity"]),
                          acceleration=tuple(meta["acceleration"]))
        result = planner.plan(obs)                    # raises AnswerParseError if malformed
        assert result.waypoints.shape == (8, 2) and np.isfinite(result.waypoints).all()
        expert = np.asarray(meta["ego_future"])
        # 4 s ahead the plan is within 25% of the expert's travelled distance (+2 m)
        want, got = np.linalg.norm(expert[-1]), np.linalg.norm(result.waypoints[-1])
        assert abs(got - want) <= 0.25 * want + 2.0, (result.text, expert.tolist())


def test_detections_and_answers_parse(planner, frames):
    root, records = frames
    det = next(r for r in records if r["task"] == "detection")
    result = planner.detect([_image(root, det)])
    assert all(d.label for d in result.detections)
    qa = [r for r in records if r["task"] == "qa"]
    for record in qa:
        answer = planner.answer([_image(root, record)], record["meta"]["question"])
        assert answer.text in record["meta"]["answer_set"], answer.text


def test_plan_cli_uses_the_bundle(frames, capsys):
    from wamdiff2_core.cli import main

    root, records = frames
    record = next(r for r in records if r["task"] == "planning")
    assert main(["plan", "--image", str(root / record["image"][0]), "--velocity",
                 str(record["meta"]["velocity"][0]), "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert np.asarray(out["waypoints"]).shape == (8, 2)
