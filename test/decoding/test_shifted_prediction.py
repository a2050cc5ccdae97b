"""Shifted prediction (``DiffusionFields.shift``): position i - 1 predicts answer token i.

The training view equals the decoders' view, the fast decoder gives the reference's tokens
(fused commit or a commit pass, constrained or not), cached equals uncached decoding, and a
shifted model made from an AR checkpoint's weights predicts an answer's first token exactly
as that AR model does (what the conversion keeps).
"""
import pytest
import torch
from test_views import random_answers

from wamdiff2_core import tasks
from engines import fast_decode
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig, FastConfig
from wamdiff2_core.decoding.reference import Context, ar_decode, diffusion_decode
from wamdiff2_core.diffusion.layout import diffusion_inputs, diffusion_logits, kept_positions
from wamdiff2_core.model import masks
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.model.prompt import prepare_prompt


def shifted(model: Wamdiff2Model, block: int) -> Wamdiff2Model:
    return model.with_fields(paradigm="diffusion", block_size=block, shift=True)


@pytest.fixture(scope="module")
def shifted_model():
    """An untrained tiny model whose end-of-answer logit copies a frequent token's, so rows
    end at different blocks."""
    model = Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4, seed=3)
    with torch.no_grad():
        w = model.hf.lm_head.weight
        w[model.fields.eoa_token_id] = w[339] * 1.5
    return shifted(model, 4)


def encode(model, prompts, images, n):
    return model.processor.encode_prompts(prompts[:n], [[im] for im in images[:n]])


@pytest.mark.parametrize("bs", [1, 4, 32])
def test_training_view_equals_the_shifted_decoders_view(shifted_model, camera_images,
                                                        prompts, bs):
    """Each xt block's predictions in the ``[prefix | x0 | xt]`` forward are the logits a
    denoising step of that block reads: [the last position before it | its own but last]."""
    model = shifted(shifted_model, bs)
    batch = encode(model, prompts, camera_images, 2)
    n_blocks, x0, xt = random_answers(model, bs)
    a = n_blocks * bs
    with torch.no_grad():
        inputs = diffusion_inputs(model, batch, x0, xt, bs)
        full = model.forward_logits(inputs.input_ids, inputs.mask, inputs.positions,
                                    **inputs.vision)
        train = diffusion_logits(full[:, -kept_positions(a, True):], a, bs, True)
        prompt = prepare_prompt(model, batch, bs)
        ctx = Context(model, prompt, use_cache=True)
        carry = ctx.last_logits
        for b in range(n_blocks):
            sl = slice(b * bs, (b + 1) * bs)
            pos = prompt.answer_positions(b * bs, bs)
            n_types, n_blocks_ = prompt.answer_layout(b * bs, bs, masks.NOISY)
            step = ctx.logits(xt[:, sl], n_types, n_blocks_, pos, keep=False)
            view = torch.cat([carry, step[:, :-1]], 1)
            torch.testing.assert_close(view, train[:, sl], atol=1e-4, rtol=0)
            c_types, c_blocks = prompt.answer_layout(b * bs, bs, masks.CLEAN)
            carry = ctx.logits(x0[:, sl], c_types, c_blocks, pos, keep=True)[:, -1:]
    # and it is not the unshifted view
    assert not torch.allclose(train, full[:, -a:], atol=1e-3)


@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_frontier",
                                  "sequential"])
def test_shifted_cached_equals_uncached(shifted_model, camera_images, prompts, rule):
    batch = encode(shifted_model, prompts, camera_images, 2)
    cfg = DecodeConfig(commit_rule=rule, max_new_tokens=12, steps_per_block=2)
    cached = diffusion_decode(shifted_model, batch, cfg, use_cache=True)
    uncached = diffusion_decode(shifted_model, batch, cfg, use_cache=False)
    assert cached.sequences == uncached.sequences
    assert all(len(s) > 0 for s in cached.sequences)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("bs", [4, 32])
@pytest.mark.parametrize("rule", list(COMMIT_RULES))
def test_fast_shifted_equals_reference(shifted_model, camera_images, prompts, rule, bs, rows,
                                       fuse):
    model = shifted(shifted_model, bs)
    batch = encode(model, prompts, camera_images, rows)
    cfg = DecodeConfig(block_size=bs, commit_rule=rule, max_new_tokens=12 if bs == 4 else 40,
                       steps_per_block=min(bs, 4))
    ref = diffusion_decode(model, batch, cfg)
    fast = fast_decode(model, batch, cfg, FastConfig(fuse_commit=fuse))
    assert fast.sequences == ref.sequences
    assert fast.finished == ref.finished
    assert (fast.stats.denoise_forwards, fast.stats.blocks) == \
        (ref.stats.denoise_forwards, ref.stats.blocks)
    if rows > 1 and bs == 4:
        assert ref.stats.blocks >= 2                      # blocks were committed


def test_shift_changes_the_answer(shifted_model, camera_images, prompts):
    """The same weights decoded unshifted give other tokens: the field is honoured."""
    batch = encode(shifted_model, prompts, camera_images, 2)
    cfg = DecodeConfig(max_new_tokens=12)
    own = shifted_model.with_fields(shift=False)
    assert diffusion_decode(own, batch, cfg).sequences != \
        diffusion_decode(shifted_model, batch, cfg).sequences


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
def test_fast_shifted_constrained_equals_reference(shifted_model, camera_images, prompts,
                                                   fuse):
    model = shifted(shifted_model, 32)
    batch = encode(model, [prompts[0], prompts[3]], camera_images, 2)
    cfg = DecodeConfig(max_new_tokens=96, constrained=True)
    lang = tasks.planning_language()
    ref = diffusion_decode(model, batch, cfg, language=lang)
    fast = fast_decode(model, batch, cfg, FastConfig(fuse_commit=fuse),
                                 language=lang)
    assert fast.sequences == ref.sequences
    for seq in ref.sequences:                      # every constrained plan parses
        tasks.parse_waypoints(model.processor.decode_answer(seq))


def test_ar_weights_predict_the_first_token_as_the_ar_model(tiny_ar, camera_images, prompts):
    """A shifted diffusion model on an AR checkpoint's weights reads block 0's first position
    from the prompt's last logits: the AR model's first-token distribution, exactly."""
    batch = encode(tiny_ar, prompts, camera_images, 4)
    ar_first = ar_decode(tiny_ar, batch, DecodeConfig(max_new_tokens=1)).sequences
    diff = tiny_ar.with_fields(paradigm="diffusion", block_size=1, shift=True)
    first = diffusion_decode(diff, batch, DecodeConfig(block_size=1, max_new_tokens=1))
    assert [s[:1] for s in first.sequences] == ar_first
    own = tiny_ar.with_fields(paradigm="diffusion", block_size=1)       # unshifted: not so
    assert [s[:1] for s in diffusion_decode(own, batch, DecodeConfig(
        block_size=1, max_new_tokens=1)).sequences] != ar_first



@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_frontier"])
def test_shifted_steps_never_sync_the_host(shifted_model, camera_images, prompts, rule):
    from test_fast_decoder import assert_diffusion_steps_never_sync

    assert shifted_model.fields.shift
    assert_diffusion_steps_never_sync(shifted_model, encode(shifted_model, prompts,
                                                            camera_images, 2), rule)
