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


def _size_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2 ** 20


def test_bundle_is_a_small_block_32_diffusion_checkpoint_with_its_ar_teacher():
    """The bundle and, at <bundle>/ar_teacher, its AR teacher (stage 0 of the same run, the
    one bench decode compares with by default): together under 30 MB."""
    assert _size_mb(BUNDLED) <= 30, f"{_size_mb(BUNDLED):.1f} MB"
    fields = json.loads((BUNDLED / "config.json").read_text())["wamdiff2"]
    assert fields["paradigm"] == "diffusion" and fields["block_size"] == 32
    teacher = BUNDLED / "ar_teacher"
    teacher_fields = json.loads((teacher / "config.json").read_text())["wamdiff2"]
    assert teacher_fields["paradigm"] == "ar" and teacher_fields["block_size"] == 1
    assert (teacher / "tokenizer.json").read_bytes() == (BUNDLED / "tokenizer.json").read_bytes()
    assert not [p for p in BUNDLED.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    assert "wamdiff2 pipeline" in (BUNDLED / "README.md").read_text()


def _planning_results(planner, root, records):
    """(record, PlanResult or AnswerParseError) for each planning record."""
    from wamdiff2_core.tasks import AnswerParseError

    out = []
    for record in (r for r in records if r["task"] == "planning"):
        meta = record["meta"]
        obs = Observation(images=[_image(root, record)], command=meta["command"],
                          velocity=tuple(meta["velocity"]),
                          acceleration=tuple(meta["acceleration"]))
        try:
            out.append((record, planner.plan(obs)))
        except AnswerParseError as exc:                 # the only failure plan() may raise
            assert exc.raw_text is not None
            out.append((record, exc))
    return out


def test_plans_on_simulator_frames_parse_and_are_plausible(planner, frames):
    """Every plan of the fresh episode parses (constrained decoding, the default: 60 of 60
    held-out plans in its model card; greedy decoding makes this episode's outcome fixed)
    and is plausible: finite, and 4 s ahead within 25% of the expert's distance (+2 m)."""
    root, records = frames
    results = _planning_results(planner, root, records)
    parsed = [(r, p) for r, p in results if not isinstance(p, Exception)]
    assert len(parsed) == len(results) == 3, [str(p) for _, p in results]
    for record, result in parsed:
        assert result.waypoints.shape == (8, 2) and np.isfinite(result.waypoints).all()
        expert = np.asarray(record["meta"]["ego_future"])
        want, got = np.linalg.norm(expert[-1]), np.linalg.norm(result.waypoints[-1])
        assert abs(got - want) <= 0.25 * want + 2.0, (result.text, expert.tolist())


def test_detections_and_answers_parse(planner, frames):
    """Every detection answer parses (constrained decoding; a box with its corners out of
    order is dropped, see parse_model_detections) and is non-empty where the frame has
    vehicles, with the data's labels; every QA answer is one of its question's answers."""
    from wamdiff2_core.evaluation.qa import in_answer_set
    from wamdiff2_core.tasks.languages import DATA_LABELS

    root, records = frames
    detection = [r for r in records if r["task"] == "detection"]
    assert any(r["meta"]["boxes"] for r in detection)
    for record in detection:
        result = planner.detect([_image(root, record)])
        assert all(d.label in DATA_LABELS for d in result.detections), result.text
        if record["meta"]["boxes"]:
            assert result.detections, result.text
    qa = [r for r in records if r["task"] == "qa"]
    for record in qa:
        answer = planner.answer([_image(root, record)], record["meta"]["question"])
        assert in_answer_set(answer.text, record["meta"]["answer_set"]), answer.text


def test_plan_cli_uses_the_bundle(planner, frames, capsys):
    """`wamdiff2 plan` with no checkpoint gives the bundled planner's waypoints."""
    from wamdiff2_core.apps.cli import main

    root, records = frames
    record, result = next((r, p) for r, p in _planning_results(planner, root, records)
                          if not isinstance(p, Exception))
    meta = record["meta"]
    assert main(["plan", "--image", str(root / record["image"][0]), "--command",
                 meta["command"], "--velocity", *map(str, meta["velocity"]),
                 "--acceleration", *map(str, meta["acceleration"]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(np.asarray(out["waypoints"]), result.waypoints)


@pytest.mark.parametrize("rule,steps", [("low_confidence_dynamic", None),
                                        ("low_confidence_budget", 8),
                                        ("low_confidence_leftmost", 8),
                                        ("low_confidence_frontier", None)])
def test_fast_decoder_equals_reference_on_the_trained_model(planner, frames, rule, steps):
    """A trained model's confidences cross the threshold (a random tiny model's never do, so
    the decoder tests there only reach the rules' quota and top-1 branches): here the fast
    decoder gives the reference's tokens with the threshold branch in play, one prompt at a
    time and as a padded batch of all prompts."""
    from wamdiff2_core.decoding.config import DecodeConfig
    from wamdiff2_core.decoding.reference import decode as reference_decode
    from wamdiff2_core.tasks import record_prompt_and_answer

    root, records = frames
    model = planner.model
    prompts = [record_prompt_and_answer(r)[0] for r in records]
    images = [[_image(root, r)] for r in records]
    cfg = DecodeConfig(commit_rule=rule, steps_per_block=steps)
    tokens = forwards = commits = 0
    for batch in [model.processor.encode_prompts([p], [i]) for p, i in zip(prompts, images)] \
            + [model.processor.encode_prompts(prompts, images)]:
        ref = reference_decode(model, batch, cfg)
        fast = planner.engine.decode(batch, cfg)                  # the planner's fast engine
        assert fast.sequences == ref.sequences
        # each commit pass (one per block but the last) rides on the next block's first step
        assert ref.stats.forwards - ref.stats.denoise_forwards == ref.stats.blocks - 1
        assert fast.stats.forwards == ref.stats.denoise_forwards
        commits += ref.stats.blocks - 1
        tokens, forwards = tokens + ref.stats.tokens, forwards + ref.stats.forwards
    assert tokens / forwards > 1.5                   # steps committed several tokens
    assert commits >= 2                              # fused commits were exercised


def test_bench_decode_compares_with_the_shipped_teacher(capsys):
    """`wamdiff2 bench decode` with no checkpoint arguments decodes the bundle against its
    shipped AR teacher (not the diffusion weights token by token): no 'no AR teacher' note,
    a paired L2, and the AR decoder commits one token per forward."""
    from wamdiff2_core.apps.cli import main

    assert main(["bench", "decode", "--samples", "1", "--repeats", "1", "--latency-reps", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not any("no AR teacher" in note for note in report["notes"]), report["notes"]
    assert report["l2_paired"]["samples"] == 1
    ar = report["decoders"]["ar_optimised"]
    assert ar["tokens_per_forward"] < 1.05 and ar["l2"]["parse_failures"] == 0
