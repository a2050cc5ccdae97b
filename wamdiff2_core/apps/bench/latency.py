"""Per-forward latencies of the fast decoders' steps (the benchmark's latency table), with
the constrained block step beside the plain one."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import torch

from wamdiff2_core.decoding.config import DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.step_probes import ar_step, diffusion_steps
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

    def steps(fuse: bool, cfg=cfg, language=None):           # built and filled by a decode
        engine = DecodingEngine(diff, "fast", replace(fast, fuse_commit=fuse))
        return diffusion_steps(engine, enc, cfg, language), engine.sync

    fused, sync = steps(True)
    out["block_step"] = step_ms(fused.step(), reps, sync)
    out["first_step"] = step_ms(fused.step(first=True), reps, sync)
    if language is not None:
        out.update(_constrained_latency(steps, diff, language, block, reps))
    unfused, sync = steps(False)
    out["commit"] = step_ms(unfused.commit(), reps, sync)
    engine = DecodingEngine(model.with_fields(paradigm="ar", block_size=1), "fast", fast)
    step = ar_step(engine, enc, DecodeConfig(max_new_tokens=reps + 2, constrained=False))
    out["ar_step"] = step_ms(step, reps, engine.sync)
    out["mode"], out["attention"] = engine.mode, engine.attention
    return out


def _constrained_latency(steps, model, language, block, reps) -> dict:
    """The constrained rows of the table: a state decoding ``language`` (a budget that
    holds its shortest answer), each step timed from an all-masked first block."""
    from wamdiff2_core.decoding.constraints.session import automaton_for

    budget = max(2 * block, automaton_for(model, language, 4096).min_tokens)
    cfg = DecodeConfig(block_size=block, max_new_tokens=-(-budget // block) * block,
                       constrained=True)
    st, sync = steps(True, cfg, language)
    fresh = st.restart()                     # the first block, everything masked

    def timed(fn):
        def run():
            fresh()
            fn()
        return step_ms(run, reps, sync) - step_ms(fresh, reps, sync)
    return {"block_step_constrained": timed(st.step()),
            "last_step_constrained": timed(st.step(last=True)),
            "constraint_select": timed(st.select(last=False)),
            "constraint_fill": timed(st.select(last=True))}


def step_ms(fn: Callable[[], object], reps: int, sync: Callable[[], None]) -> float:
    """Milliseconds one call of ``fn`` takes: one untimed call, then the mean of ``reps``,
    ``sync`` (the engine's: its device) waited for around them (the latency table's timer,
    exact mode's too)."""
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) * 1e3 / reps
