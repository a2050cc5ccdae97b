"""Per-forward latencies of the fast decoders' steps (the benchmark's latency table), with
the constrained block step beside the plain one."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import torch

from wamdiff2_core.decoding.config import DecodeConfig, FastConfig, resolve_decode
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.runner import sync
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.tasks.languages import AnswerLanguage


@torch.inference_mode()
def forward_latency(model: Wamdiff2Model, sample, batch: int, block: int,
                    fast: FastConfig, reps: int = 20,
                    language: AnswerLanguage | None = None) -> dict:
    """Milliseconds per forward of the fast decoders' steps (batch ``batch`` of one prompt):
    an AR token step (host plan included), a block denoising step, the first step of a block
    with the previous block's commit fused in (two blocks of queries), and a separate commit
    pass (what an unfused decoder runs instead). With ``language``: also the block step with
    the constrained selection (``block_step_constrained``), the last step of a block's budget
    with the left-to-right fill (``last_step_constrained``), and the constrained selections
    alone (``constraint_select``, ``constraint_fill``)."""
    enc = model.processor.encode_prompts([sample.prompt] * batch, [sample.images] * batch)
    out = {}
    diff = model.with_fields(paradigm="diffusion", block_size=block)
    cfg = DecodeConfig(block_size=block, max_new_tokens=2 * block, constrained=False)

    def state(fuse: bool, cfg=cfg, language=None):            # built and filled by a decode
        engine = DecodingEngine(diff, "fast", replace(fast, fuse_commit=fuse))
        cfg = resolve_decode(cfg, diff.fields)                 # the rule the state is keyed by
        engine.decode(enc, cfg, language)
        runner = engine.runner
        key = ("diffusion", runner.bucket(batch), block, cfg.commit_rule, True, fuse) + \
            ((language,) if language else ())
        return runner.states[key], runner.device

    fused, dev = state(True)
    out["block_step"] = step_ms(lambda: fused.run_step(0.0, None, batch), reps, dev)
    out["first_step"] = step_ms(lambda: fused.run_step(0.0, None, batch, first=True), reps, dev)
    if language is not None:
        out.update(_constrained_latency(state, diff, language, block, batch, reps, dev))
    unfused, dev = state(False)
    out["commit"] = step_ms(unfused.commit, reps, dev)
    ar = model.with_fields(paradigm="ar", block_size=1)
    engine = DecodingEngine(ar, "fast", fast)
    engine.decode(enc, DecodeConfig(max_new_tokens=reps + 2, constrained=False))
    runner = engine.runner
    st = runner.states[("ar", runner.bucket(batch), True)]
    n = [int(x) for x in st.base.tolist()]

    def ar_step(j=[0]):
        j[0] += 1
        st.attn.plan([m + j[0] for m in n])
        st.run_step(0.0, None, batch)
    st.c.zero_()
    out["ar_step"] = step_ms(ar_step, reps, runner.device)
    out["mode"], out["attention"] = runner.mode, runner.attention
    return out


def _constrained_latency(state, model, language, block, batch, reps, dev) -> dict:
    """The constrained rows of the table: a state decoding ``language`` (a budget that
    holds its shortest answer), each step timed from an all-masked first block."""
    from wamdiff2_core.decoding.constraints.session import automaton_for

    budget = max(2 * block, automaton_for(model, language, 4096).min_tokens)
    cfg = DecodeConfig(block_size=block, max_new_tokens=-(-budget // block) * block,
                       constrained=True)
    st, dev = state(True, cfg, language)

    def fresh():                             # the first block, everything masked
        st.step.zero_()
        st.x.fill_(st.mask_id)
        st.cons.start(cfg.max_new_tokens, batch)
        st.cons.begin_block(0)

    def timed(fn):
        def run():
            fresh()
            fn()
        return step_ms(run, reps, dev) - step_ms(fresh, reps, dev)
    return {"block_step_constrained": timed(lambda: st.run_step(0.0, None, batch)),
            "last_step_constrained": timed(lambda: st.run_step(0.0, None, batch, last=True)),
            "constraint_select": timed(lambda: st.selects[False]()),
            "constraint_fill": timed(lambda: st.selects[True]())}


def step_ms(fn: Callable[[], object], reps: int, device: torch.device) -> float:
    """Milliseconds one call of ``fn`` takes: one untimed call, then the mean of ``reps``,
    the device synchronised around them (the latency table's timer, exact mode's too)."""
    fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3 / reps
