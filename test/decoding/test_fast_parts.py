"""Parts of the fast decoder: static cache packing and writes, SDPA backend against a naive
softmax, the compact text forward against the HF model, backend and mode resolution."""
import pytest
import torch

from wamdiff2_core.decoding.attention import SdpaAttention, resolve_attention
from wamdiff2_core.decoding.graphs import resolve_mode
from wamdiff2_core.decoding.config import FastConfig
from wamdiff2_core.decoding.runner import FastRunner
from wamdiff2_core.decoding.static_cache import StaticKVCache
from wamdiff2_core.model import masks
from wamdiff2_core.model.modeling import new_cache
from wamdiff2_core.model.prompt import prepare_prompt


def test_load_prefill_packs_rows_and_write_hits_slots():
    dyn = new_cache_like(layers=2, batch=2, heads=1, width=5, dim=3)
    cache = StaticKVCache(2, 2, 1, 8, 3, torch.float32, "cpu")
    cache.load_prefill(dyn, [5, 2])                       # row 1: 3 pad columns, 2 real
    torch.testing.assert_close(cache.keys(1)[1, :, :2], dyn.layers[1].keys[1, :, 3:])
    torch.testing.assert_close(cache.values(0)[0, :, :5], dyn.layers[0].values[0])
    assert cache.keys(0)[1, :, 2:].abs().sum() == 0      # nothing else written
    k = torch.randn(2, 2, 1, 3)                           # (B, K, Hkv, D)
    slots = torch.tensor([[5, 6], [2, 3]])
    cache.write(1, k, -k, cache.write_index(slots))
    torch.testing.assert_close(cache.keys(1)[0, 0, 5:7], k[0, :, 0])
    torch.testing.assert_close(cache.values(1)[1, 0, 2:4], -k[1, :, 0])
    torch.testing.assert_close(cache.keys(1)[1, :, :2], dyn.layers[1].keys[1, :, 3:])


def new_cache_like(layers, batch, heads, width, dim):
    from transformers.cache_utils import DynamicCache

    dyn = DynamicCache()
    for i in range(layers):
        dyn.update(torch.randn(batch, heads, width, dim), torch.randn(batch, heads, width, dim),
                   i)
    return dyn


def test_sdpa_backend_matches_naive_grouped_attention():
    torch.manual_seed(0)
    b, n, hq, hkv, d, length = 2, 3, 6, 2, 8, 10
    q = torch.randn(b, n, hq, d)
    k, v = torch.randn(b, hkv, length, d), torch.randn(b, hkv, length, d)
    kv_len = torch.tensor([4, 10])
    attn = SdpaAttention(hq, hkv, d, d ** -0.5)
    got = attn(q, k, v, attn.metadata(kv_len, length))                    # (B, K, Hq*D)
    for row in range(b):
        for h in range(hq):
            keys, vals = k[row, h // 3, :kv_len[row]], v[row, h // 3, :kv_len[row]]
            p = torch.softmax(q[row, :, h] @ keys.T * d ** -0.5, -1)
            torch.testing.assert_close(got[row, :, h * d:(h + 1) * d], p @ vals)


def test_trimmed_sdpa_reads_only_the_planned_slots():
    """Eager mode's trimmed backend (keys up to the longest row, no mask when rows are
    equal) gives the full-cache result; garbage beyond the planned lengths is never read."""
    torch.manual_seed(1)
    b, n, hq, hkv, d, length = 2, 4, 6, 2, 8, 16
    q = torch.randn(b, n, hq, d)
    k, v = torch.randn(b, hkv, length, d), torch.randn(b, hkv, length, d)
    full = SdpaAttention(hq, hkv, d, d ** -0.5)
    trim = SdpaAttention(hq, hkv, d, d ** -0.5, trim=True)
    for lens in ([7, 7], [5, 9]):
        kv_len = torch.tensor(lens)
        want = full(q, k, v, full.metadata(kv_len, length))
        trim.plan(lens)
        meta = trim.metadata(kv_len, length)
        assert (meta is None) == (lens[0] == lens[1])
        k2, v2 = k.clone(), v.clone()
        k2[:, :, max(lens):], v2[:, :, max(lens):] = float("nan"), float("nan")
        torch.testing.assert_close(trim(q, k2, v2, meta), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_is_bit_identical_to_transformers(dtype):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

    from wamdiff2_core.decoding.static_model import apply_rope, rope_tables

    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 5, h, 32, generator=g).to(dtype) for h in (6, 2))
    cos, sin = (torch.randn(2, 5, 32, generator=g).to(dtype) for _ in range(2))
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
    got = apply_rope(torch.cat((q, k), 2), *rope_tables(cos, sin))
    assert torch.equal(got[:, :, :6], want_q) and torch.equal(got[:, :, 6:], want_k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_bit_identical_to_the_hf_module(dtype):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRMSNorm

    from wamdiff2_core.decoding.static_model import rms_norm

    torch.manual_seed(2)
    norm = Qwen3VLTextRMSNorm(32, eps=1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32))
        x = (torch.randn(3, 5, 32) * 4).to(dtype)
        assert torch.equal(rms_norm(x, norm.weight, norm.variance_epsilon), norm(x))


def test_static_forward_matches_the_hf_block_forward(tiny_diffusion, camera_images, prompts):
    """One noisy block against the prompt: compact forward == HF forward with the block mask,
    for a batch with left padding."""
    model = tiny_diffusion
    batch = model.processor.encode_prompts(prompts[:2], [[camera_images[0]],
                                                        [camera_images[1]]])
    k = 4
    with torch.no_grad():
        prompt = prepare_prompt(model, batch, k)
        dyn = new_cache(model)
        model.forward_logits(prompt.input_ids, prompt.prefill_mask(), prompt.positions, dyn,
                             use_cache=True, **prompt.vision)
        runner = FastRunner(model, FastConfig())
        lengths = prompt.valid.sum(-1).tolist()
        cache = runner.text.new_cache(2, 256)
        cache.load_prefill(dyn, lengths)
        x = torch.randint(5, 500, (2, k), generator=torch.Generator().manual_seed(0))
        pos = prompt.answer_positions(0, k)
        types, blocks = prompt.answer_layout(0, k, masks.NOISY)
        mask = masks.attention_mask(types, blocks, torch.cat([prompt.types, types], -1),
                                    torch.cat([prompt.blocks, blocks], -1))
        want = model.forward_logits(x, mask, pos, dyn, use_cache=True)
        base = torch.tensor(lengths)
        cos, sin = runner.text.rope(pos)
        attn = runner.new_attention(2, k, 256)
        got = runner.text.forward(x, cos, sin, base[:, None] + torch.arange(k), base + k,
                                  cache, attn)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_cpu_resolution_and_user_errors():
    assert resolve_mode("auto", "cpu") == "eager"
    assert resolve_mode("compile", "cpu") == "compile"
    assert resolve_mode("compile", "cpu", enforce_eager=True) == "eager"
    assert resolve_attention("auto", "cpu", torch.bfloat16, 128) == "sdpa"
    for mode in ("graphs", "compile-graphs"):
        with pytest.raises(ValueError, match="captures CUDA graphs and needs a CUDA device"):
            resolve_mode(mode, "cpu")
    with pytest.raises(ValueError, match="flashinfer backend needs a CUDA device"):
        resolve_attention("flashinfer", "cpu", torch.bfloat16, 128)
    with pytest.raises(ValueError, match="unknown attention backend"):
        resolve_attention("flash", "cpu", torch.float32, 32)
    with pytest.raises(ValueError, match="sync_every"):
        FastConfig(sync_every=0)


def test_batch_buckets(tiny_diffusion):
    runner = FastRunner(tiny_diffusion, FastConfig(pad_batch=True, batch_buckets=(1, 2, 4)))
    assert [runner.bucket(n) for n in (1, 2, 3, 4, 5, 9)] == [1, 2, 4, 4, 8, 12]
    assert FastRunner(tiny_diffusion, FastConfig()).bucket(3) == 3        # eager: no padding
