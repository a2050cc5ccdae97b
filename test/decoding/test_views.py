"""Training view == inference view, cached == uncached decoding, batched == one by one."""
import pytest
import torch

from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig
from wamdiff2_core.decoding.reference import Context, ar_decode, diffusion_decode
from wamdiff2_core.diffusion.layout import ar_inputs, diffusion_inputs
from wamdiff2_core.model import masks
from wamdiff2_core.model.prompt import prepare_prompt


def random_answers(model, bs: int) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(blocks, x0, xt) for 2 rows: random answer tokens over 3 blocks (2 at block 32) and a
    copy with about half of them masked, seeded by the block size."""
    n_blocks = 3 if bs < 32 else 2
    g = torch.Generator().manual_seed(bs)
    x0 = torch.randint(10, 600, (2, n_blocks * bs), generator=g)
    xt = torch.where(torch.rand(x0.shape, generator=g) < 0.5, model.fields.mask_token_id, x0)
    return n_blocks, x0, xt


@pytest.mark.parametrize("bs", [1, 4, 32])
def test_training_view_equals_cached_block_decode(tiny_diffusion, camera_images, prompts, bs):
    model = tiny_diffusion
    batch = model.processor.encode_prompts(prompts[:2], [[camera_images[0]], [camera_images[1]]])
    n_blocks, x0, xt = random_answers(model, bs)
    a = n_blocks * bs
    with torch.no_grad():
        inputs = diffusion_inputs(model, batch, x0, xt, bs)
        train_logits = model.forward_logits(inputs.input_ids, inputs.mask, inputs.positions,
                                            **inputs.vision)
        prompt = prepare_prompt(model, batch, bs)
        ctx = Context(model, prompt, use_cache=True)
        for b in range(n_blocks):
            sl = slice(b * bs, (b + 1) * bs)
            pos = prompt.answer_positions(b * bs, bs)
            n_types, n_blocks_ = prompt.answer_layout(b * bs, bs, masks.NOISY)
            step = ctx.logits(xt[:, sl], n_types, n_blocks_, pos, keep=False)
            want = train_logits[:, inputs.prompt_len + a + b * bs:][:, :bs]
            torch.testing.assert_close(step, want, atol=1e-4, rtol=0)
            c_types, c_blocks = prompt.answer_layout(b * bs, bs, masks.CLEAN)
            ctx.logits(x0[:, sl], c_types, c_blocks, pos, keep=True)


def test_ar_training_view_equals_cached_decode(tiny_ar, camera_images, prompts):
    model = tiny_ar
    batch = model.processor.encode_prompts(prompts[:2], [[camera_images[0]], [camera_images[1]]])
    answer = torch.randint(10, 600, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        inputs = ar_inputs(model, batch, answer)
        full = model.forward_logits(inputs.input_ids, inputs.mask, inputs.positions,
                                    **inputs.vision)
        prompt = prepare_prompt(model, batch, 1)
        ctx = Context(model, prompt, use_cache=True)
        torch.testing.assert_close(ctx.last_logits, full[:, inputs.prompt_len - 1:][:, :1],
                                   atol=1e-4, rtol=0)
        for j in range(5):
            types, blocks = prompt.answer_layout(j, 1, masks.CLEAN)
            step = ctx.logits(answer[:, j:j + 1], types, blocks,
                              prompt.answer_positions(j, 1), keep=True)
            torch.testing.assert_close(step, full[:, inputs.prompt_len + j:][:, :1],
                                       atol=1e-4, rtol=0)


@pytest.mark.parametrize("rule", COMMIT_RULES)
@pytest.mark.parametrize("bs", [1, 4, 32])
def test_cached_equals_uncached_diffusion(tiny_diffusion, camera_images, prompts, rule, bs):
    batch = tiny_diffusion.processor.encode_prompts(prompts[:2], [[camera_images[0]],
                                                                  [camera_images[1]]])
    cfg = DecodeConfig(block_size=bs, commit_rule=rule, max_new_tokens=2 * bs if bs > 1 else 6,
                       steps_per_block=max(1, bs // 2))
    cached = diffusion_decode(tiny_diffusion, batch, cfg, use_cache=True)
    uncached = diffusion_decode(tiny_diffusion, batch, cfg, use_cache=False)
    assert cached.sequences == uncached.sequences
    assert all(len(s) > 0 for s in cached.sequences)


def test_ar_cached_equals_uncached(tiny_ar, camera_images, prompts):
    batch = tiny_ar.processor.encode_prompts(prompts[:2], [[camera_images[0]],
                                                           [camera_images[1]]])
    cfg = DecodeConfig(max_new_tokens=10)
    cached = ar_decode(tiny_ar, batch, cfg)
    uncached = ar_decode(tiny_ar, batch, cfg, use_cache=False)
    assert cached.sequences == uncached.sequences
    assert cached.stats.forwards == 9 and cached.stats.tokens == 20


@pytest.mark.parametrize("decoder", ["diffusion", "ar"])
def test_batched_equals_one_by_one(tiny_diffusion, tiny_ar, camera_images, prompts, decoder):
    """Rows of different prompt lengths (left padding) decode as they do alone."""
    model, fn = (tiny_diffusion, diffusion_decode) if decoder == "diffusion" \
        else (tiny_ar, ar_decode)
    images = [[im] for im in camera_images]
    cfg = DecodeConfig(max_new_tokens=12)
    batched = fn(model, model.processor.encode_prompts(prompts, images), cfg)
    lengths = model.processor.encode_prompts(prompts, images)["valid"].sum(-1)
    assert len(set(lengths.tolist())) > 1          # padding really happens
    for i, (p, im) in enumerate(zip(prompts, images)):
        alone = fn(model, model.processor.encode_prompts([p], [im]), cfg)
        assert alone.sequences[0] == batched.sequences[i], i


def test_mask_token_is_never_committed(tiny_diffusion, camera_images, prompts):
    batch = tiny_diffusion.processor.encode_prompts(prompts[:1], [[camera_images[0]]])
    out = diffusion_decode(tiny_diffusion, batch, DecodeConfig(max_new_tokens=16,
                                                               temperature=1.0))
    assert tiny_diffusion.fields.mask_token_id not in out.sequences[0]
