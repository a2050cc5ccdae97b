"""``decoding.step_probes``: the steps the benchmarks time are those of the state a decode
built (no state built for the probe), each runs as one step of it, and misuse is refused;
the engine says what it runs with."""
from dataclasses import replace

import pytest
import torch

from wamdiff2_core import tasks
from wamdiff2_core.decoding import step_probes
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine

BLOCK = 4


@pytest.fixture(scope="module")
def batch(tiny_diffusion, camera_images, prompts):
    return tiny_diffusion.processor.encode_prompts(prompts[:2], [[i] for i in camera_images[:2]])


def probe_engine(model, **fast):
    return DecodingEngine(model, "fast", FastConfig(**fast))


def test_the_engine_says_what_it_runs_with(tiny_diffusion):
    fast = probe_engine(tiny_diffusion)
    assert (fast.mode, fast.attention, fast.sync_every) == ("eager", "sdpa", 1)
    assert fast.device == tiny_diffusion.device and fast.dtype == torch.float32
    ref = DecodingEngine(tiny_diffusion, "reference")
    assert ref.device == tiny_diffusion.device
    assert (ref.mode, ref.attention, ref.sync_every, ref.dtype) == (None,) * 4
    fast.sync()                                   # nothing queued on a CPU: returns at once


@torch.inference_mode()                  # where the benchmarks call steps
def test_diffusion_steps_run_on_the_decodes_state(tiny_diffusion, batch):
    engine = probe_engine(tiny_diffusion)
    cfg = DecodeConfig(block_size=BLOCK, max_new_tokens=2 * BLOCK, constrained=False)
    probe = step_probes.diffusion_steps(engine, batch, cfg)
    state = probe._state
    assert list(engine.runner.states.values()) == [state]   # the decode's, none built anew
    before = int(state.step)
    probe.step()()
    probe.step(first=True)()
    assert int(state.step) == before + 2                    # each call: one step of it
    with pytest.raises(ValueError, match="no commit pass"):
        probe.commit()
    with pytest.raises(ValueError, match="selects inside its step"):
        probe.select()
    unfused = step_probes.diffusion_steps(probe_engine(tiny_diffusion, fuse_commit=False),
                                          batch, cfg)
    unfused.commit()()
    with pytest.raises(ValueError, match="no fused first step"):
        unfused.step(first=True)


@torch.inference_mode()
def test_constrained_steps_restart_from_an_all_masked_block(tiny_diffusion, batch):
    language = tasks.planning_language()
    engine = probe_engine(tiny_diffusion)
    cfg = DecodeConfig(block_size=BLOCK, max_new_tokens=96, constrained=True)
    probe = step_probes.diffusion_steps(engine, batch, cfg, language)
    state = probe._state
    probe.restart()()
    assert int(state.step) == 0 and bool((state.x == state.mask_id).all())
    probe.step()()
    assert int(state.step) == 1 and bool((state.x != state.mask_id).any())
    probe.restart()()
    probe.select(last=True)()                 # the fill: every position of the block chosen
    assert not bool((state.x[:2] == state.mask_id).any())
    probe.step(last=True)()


@torch.inference_mode()
def test_an_ar_step_feeds_the_next_answer_offset(tiny_ar, batch):
    engine = probe_engine(tiny_ar)
    step = step_probes.ar_step(engine, batch, DecodeConfig(max_new_tokens=6, constrained=False))
    (state,) = engine.runner.states.values()
    assert int(state.c) == 0
    for k in range(1, 6):                     # max_new_tokens - 1 calls fit the cache
        step()
        assert int(state.c) == k


@torch.inference_mode()
def test_a_verify_step_accepts_tokens_from_where_rewind_puts_the_rows(tiny_diffusion, batch):
    engine = DecodingEngine(tiny_diffusion, "fast", verifier="self",
                            exact=ExactConfig(draft_steps=2))
    cfg = DecodeConfig(block_size=BLOCK, max_new_tokens=2 * BLOCK, constrained=False,
                       mode="exact")
    probe = step_probes.verify_steps(engine, batch, cfg)
    assert probe.width == ExactConfig(draft_steps=2).resolved(BLOCK, "cpu").verify_width
    (state,) = engine.verifier_runner.states.values()
    probe.rewind()
    assert not bool(state.rows.pos.any()) and not bool(state.rows.done.any())
    probe.verify()
    assert bool((state.rows.pos[:2] >= 1).all())           # the verifier's next token, at least


def test_probes_refuse_what_they_cannot_time(tiny_diffusion, batch):
    cfg = DecodeConfig(block_size=BLOCK, max_new_tokens=2 * BLOCK, constrained=False)
    with pytest.raises(ValueError, match="reference backend"):
        step_probes.diffusion_steps(DecodingEngine(tiny_diffusion, "reference"), batch, cfg)
    with pytest.raises(ValueError, match="greedy"):
        step_probes.diffusion_steps(probe_engine(tiny_diffusion), batch,
                                    replace(cfg, temperature=0.7))
    with pytest.raises(ValueError, match="exact-mode"):
        step_probes.verify_steps(probe_engine(tiny_diffusion), batch, cfg)
