"""Exact mode on a GPU: with CUDA graphs it gives the reference's tokens and drafts, which are
the verifier's greedy answers (fp32, SDPA), for tiny untrained models and for the bundled
model with its AR teacher on the fixture prompts; graph replays equal eager runs.

Skipped without CUDA (conftest). ``STEPS=exact bash scripts/gpu_check.sh`` runs these and the
exact benchmark on a GPU.
"""
import json

import pytest
from test_exact_decoder import LANGUAGES, TINY, same_drafts

from bundle_answers import FIXTURE, RECORDS
from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.reference import ar_decode
from wamdiff2_core.decoding.verify import self_verifier
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import load_model
from wamdiff2_core.types import bundled_checkpoint_path

pytestmark = pytest.mark.gpu


def graphs(fuse: bool = True) -> FastConfig:
    return FastConfig(mode="graphs", attention="sdpa", fuse_commit=fuse)


@pytest.fixture(scope="module")
def cuda_drafter():
    return Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4, seed=0,
                                     device="cuda")


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_graphs_equal_reference_and_ar(cuda_drafter, camera_images, prompts, fuse, rows,
                                       constrained):
    verifier = self_verifier(cuda_drafter)
    batch = cuda_drafter.processor.encode_prompts(prompts[:rows],
                                                  [[i] for i in camera_images[:rows]])
    language = tasks.detection_language() if constrained else None
    cfg = DecodeConfig(max_new_tokens=24, constrained=constrained, mode="exact")
    want = ar_decode(verifier, batch, DecodeConfig(max_new_tokens=24, constrained=constrained),
                     language=language)
    for exact in TINY:
        engine = DecodingEngine(cuda_drafter, "fast", graphs(fuse), verifier=verifier,
                                exact=exact)
        reference = DecodingEngine(cuda_drafter, "reference", verifier=verifier, exact=exact)
        assert engine.runner.mode == "graphs"
        out, ref = engine.decode(batch, cfg, language), reference.decode(batch, cfg, language)
        assert out.sequences == ref.sequences == want.sequences and same_drafts(out, ref)


def test_graph_replays_equal_eager_runs(cuda_drafter, camera_images, prompts):
    batch = cuda_drafter.processor.encode_prompts(prompts[:3], [[i] for i in camera_images[:3]])
    cfg = DecodeConfig(max_new_tokens=24, mode="exact")
    eager = FastConfig(mode="eager", attention="sdpa")
    outs = [DecodingEngine(cuda_drafter, "fast", fast).decode(batch, cfg)
            for fast in (graphs(), eager)]
    assert outs[0].sequences == outs[1].sequences and same_drafts(*outs)


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_bundled_model_on_a_gpu_answers_as_its_teacher(constrained):
    """fp32 on the GPU: exact answers (CUDA graphs) equal the teacher's greedy answers
    (its CUDA-graph AR decoder) on every fixture prompt."""
    from PIL import Image

    model = load_model(None, device="cuda")
    teacher = load_model(f"{bundled_checkpoint_path()}/ar_teacher", device="cuda")
    records = json.loads(RECORDS.read_text())
    engine = DecodingEngine(model, "fast", graphs(), verifier=teacher, exact=ExactConfig())
    ar = DecodingEngine(teacher, "fast", graphs())
    for task, language in LANGUAGES.items():
        mine = [r for r in records if r["task"] == task]
        batch = model.processor.encode_prompts(
            [tasks.record_prompt_and_answer(r)[0] for r in mine],
            [[Image.open(FIXTURE / p).convert("RGB") for p in r["image"]] for r in mine])
        language = language if constrained else None
        cfg = DecodeConfig(max_new_tokens=128, constrained=constrained)
        out = engine.decode(batch, DecodeConfig(max_new_tokens=128, constrained=constrained,
                                                mode="exact"), language)
        assert out.sequences == ar.decode(batch, cfg, language).sequences, task
        assert out.stats.accepted_per_block > 1.5
