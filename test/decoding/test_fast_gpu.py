"""The fast decoders on a GPU: CUDA graphs give the reference's tokens (fp32, SDPA);
FlashInfer attention agrees with SDPA; graphs replay exactly what eager runs compute.

Skipped without CUDA (conftest); the FlashInfer tests also need the `gpu` extra.
"""
import json

import pytest
import torch

from wamdiff2_core.apps.cli import main
from wamdiff2_core.decoding.attention import FlashInferAttention, SdpaAttention
from engines import fast_decode
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.reference import decode as reference_decode
from wamdiff2_core.model import presets
from wamdiff2_core.model.modeling import Wamdiff2Model

pytestmark = pytest.mark.gpu
RULES = list(COMMIT_RULES)
GRAPHS = FastConfig(mode="graphs", attention="sdpa")


@pytest.fixture(scope="module")
def cuda_models():
    return {p: Wamdiff2Model.from_preset("tiny", paradigm=p, block_size=4, seed=0,
                                         device="cuda") for p in ("diffusion", "ar")}


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("bs", [1, 4, 32])
@pytest.mark.parametrize("rule", RULES)
def test_graphs_equal_reference(cuda_models, camera_images, prompts, rule, bs, rows, fuse):
    model = cuda_models["diffusion"]
    batch = model.processor.encode_prompts(prompts[:rows], [[i] for i in camera_images[:rows]])
    cfg = DecodeConfig(block_size=bs, commit_rule=rule, steps_per_block=min(bs, 4),
                       max_new_tokens=6 if bs == 1 else 3 * bs)
    engine = DecodingEngine(model, "fast", FastConfig(mode="graphs", attention="sdpa",
                                                       fuse_commit=fuse))
    assert engine.runner.mode == "graphs"
    fast = engine.decode(batch, cfg)
    assert fast.sequences == reference_decode(model, batch, cfg).sequences


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
@pytest.mark.parametrize("bs", [4, 32])
@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_frontier"])
def test_shifted_graphs_equal_reference(cuda_models, camera_images, prompts, rule, bs, fuse):
    """A shifted model (``fields.shift``): the carried logits in captured steps."""
    model = cuda_models["diffusion"].with_fields(block_size=bs, shift=True)
    batch = model.processor.encode_prompts(prompts[:3], [[i] for i in camera_images[:3]])
    cfg = DecodeConfig(block_size=bs, commit_rule=rule, steps_per_block=min(bs, 4),
                       max_new_tokens=3 * bs)
    graphs = FastConfig(mode="graphs", attention="sdpa", fuse_commit=fuse)
    assert fast_decode(model, batch, cfg, graphs).sequences == \
        reference_decode(model, batch, cfg).sequences


@pytest.mark.parametrize("rows", [1, 3])
def test_ar_graphs_equal_reference(cuda_models, camera_images, prompts, rows):
    model = cuda_models["ar"]
    batch = model.processor.encode_prompts(prompts[:rows], [[i] for i in camera_images[:rows]])
    cfg = DecodeConfig(max_new_tokens=12)
    assert fast_decode(model, batch, cfg, GRAPHS).sequences == \
        reference_decode(model, batch, cfg).sequences


def test_compiled_graphs_equal_reference(cuda_models, camera_images, prompts):
    """torch.compile, then capture: still the reference's tokens (fp32, SDPA)."""
    model = cuda_models["diffusion"]
    batch = model.processor.encode_prompts(prompts[:2], [[i] for i in camera_images[:2]])
    cfg = DecodeConfig(block_size=4, max_new_tokens=12)
    engine = DecodingEngine(model, "fast", FastConfig(mode="compile-graphs"))
    assert engine.runner.mode == "compile-graphs"
    assert engine.decode(batch, cfg).sequences == \
        reference_decode(model, batch, cfg).sequences


def _flashinfer():
    return pytest.importorskip("flashinfer", reason="needs the gpu extra (flashinfer-python)")


@pytest.mark.parametrize("qo_len", [1, 32])
def test_flashinfer_attention_matches_sdpa(qo_len):
    _flashinfer()
    torch.manual_seed(0)
    b, hq, hkv, d, length = 3, 16, 8, 128, 512
    kv_len = [37, 512, 200]
    q = torch.randn(b, qo_len, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, length, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    fi = FlashInferAttention(hq, hkv, d, d ** -0.5, batch=b, qo_len=qo_len, max_len=length,
                             dtype=torch.bfloat16, device="cuda")
    fi.plan(kv_len)
    sd = SdpaAttention(hq, hkv, d, d ** -0.5)
    want = sd(q, k, v, sd.metadata(torch.tensor(kv_len, device="cuda"), length))
    torch.testing.assert_close(fi(q, k, v, None), want, atol=2e-2, rtol=2e-2)


@pytest.fixture(scope="module")
def hd128_model():
    """A tiny model in bf16 with the 2B shape's head size (128), so FlashInfer needs the same
    kernel here as for the benchmark (one JIT build on a machine without prebuilt kernels)."""
    tiny = presets.PRESETS["tiny"]
    text = dict(tiny.text, hidden_size=256, num_attention_heads=2, num_key_value_heads=1,
                head_dim=128, rope_parameters=presets._mrope(128))
    vision = dict(tiny.vision, out_hidden_size=256)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(presets.PRESETS, "tiny-hd128",
                   presets.Preset("tiny-hd128", "tiny-bpe", text, vision, tiny.max_pixels))
        return Wamdiff2Model.from_preset("tiny-hd128", block_size=32, device="cuda",
                                         dtype=torch.bfloat16)


def test_flashinfer_graphs_replay_equals_flashinfer_eager(hd128_model, camera_images, prompts):
    _flashinfer()
    model = hd128_model
    batch = model.processor.encode_prompts(prompts[:2], [[i] for i in camera_images[:2]])
    cfg = DecodeConfig(max_new_tokens=64, steps_per_block=8)
    engine = DecodingEngine(model, "fast", FastConfig(mode="graphs", attention="flashinfer"))
    graphs = engine.decode(batch, cfg)
    eager = fast_decode(model, batch, cfg, FastConfig(mode="eager", attention="flashinfer"))
    assert engine.runner.attention == "flashinfer"
    assert graphs.sequences == eager.sequences
    assert all(model.fields.mask_token_id not in s for s in graphs.sequences)


def test_bench_on_gpu_reports_graphs_and_eager_latencies(capsys):
    assert main(["bench", "decode", "--preset", "tiny", "--device", "cuda", "--block-size",
                 "4", "--max-new-tokens", "8", "--samples", "2", "--no-constrained",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["fast"]["resolved_mode"] == "graphs" and r["fast_matches_reference"] is True
    assert set(r["latency_ms"]) == {"eager", "graphs"}
