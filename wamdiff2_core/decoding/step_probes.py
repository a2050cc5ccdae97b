"""Single steps of a fast engine's decoder states, for the benchmarks' step timers.

A decode builds (compiles or captures) and fills the state of its shape; each probe here runs
one decode of a batch on a ``engine.DecodingEngine`` of the fast backend, finds the state that
decode used and hands out zero-argument callables that run one of its steps on the buffers
the decode left: the replayed step a decode runs, alone, so a timer (with ``engine.sync()``
around it) measures exactly that. Benchmarks read no runner or state themselves.

Call them inside ``torch.inference_mode()`` (an eager state's buffers are inference
tensors). They overwrite the state's buffers and take no turn on the engine's lock: probe an
engine built for the probe, which no other caller decodes with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from wamdiff2_core.decoding import fast, fast_exact
from wamdiff2_core.decoding.config import DecodeConfig, resolve_decode
from wamdiff2_core.decoding.constraints.session import language_for
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.fast import DiffusionState
from wamdiff2_core.decoding.runner import FastRunner
from wamdiff2_core.tasks.languages import AnswerLanguage

Step = Callable[[], None]


def _decoded(engine: DecodingEngine, batch: dict, cfg: DecodeConfig,
             language: AnswerLanguage | None):
    """Decode ``batch`` greedily with ``cfg`` (building and filling its state); the resolved
    config, the rows and the automaton the decode enforced (or None)."""
    if engine.runner is None:
        raise ValueError("step probes time the fast decoders' states: the engine uses the "
                         "reference backend")
    cfg = resolve_decode(cfg, engine.model.fields)
    if cfg.temperature != 0:
        raise ValueError("step probes time greedy steps: decode with temperature 0")
    engine.decode(batch, cfg, language)
    language = language_for(cfg, language)
    auto = engine.automaton(language, cfg.max_new_tokens) if language else None
    return cfg, batch["input_ids"].shape[0], auto


def _existing(runner: FastRunner, get):
    """The state ``get()`` returns, which must be one the decode before built (a key that
    differed from the decode's would build an empty state: a bug here, not a timing)."""
    known = {id(s) for s in runner.states.values()}
    state = get()
    if id(state) not in known:
        raise RuntimeError("the probed state is not the one the decode used")
    return state


class DiffusionSteps:
    """The steps of the block-diffusion state a greedy decode of ``rows`` rows built, its
    buffers as the decode left them (``diffusion_steps``)."""

    def __init__(self, state: DiffusionState, rows: int, max_new_tokens: int):
        self._state, self._rows, self._budget = state, rows, max_new_tokens

    def step(self, first: bool = False, last: bool = False) -> Step:
        """One denoising step of the block in the buffers: ``first``: the fused step that
        also commits the finished block (an engine with ``fuse_commit``); ``last``: the last
        step of a block's budget (the constrained step fills every position)."""
        state, rows = self._state, self._rows
        if first and not state.fuse:
            raise ValueError("an unfused state has no fused first step")
        return lambda: state.run_step(0.0, None, rows, first=first, last=last)

    def commit(self) -> Step:
        """The separate commit pass of the finished block (an engine without
        ``fuse_commit``)."""
        if self._state.fuse:
            raise ValueError("a fused state commits in its first step: no commit pass")
        return self._state.commit

    def select(self, last: bool = False) -> Step:
        """The constrained selection alone, on the kept columns of the last forward (a
        constrained state); ``last``: the budget's last step's left-to-right fill."""
        if not self._state.cons:
            raise ValueError("an unconstrained greedy state selects inside its step")
        return self._state.selects[last]

    def restart(self) -> Step:
        """Back to the answer's first block, every position masked, the step count and the
        language's automaton at their start (a constrained state)."""
        state, rows, budget = self._state, self._rows, self._budget
        if not state.cons:
            raise ValueError("restart is for a constrained state")

        def run() -> None:
            state.step.zero_()
            state.x.fill_(state.mask_id)
            state.cons.start(budget, rows)
            state.cons.begin_block(0)
        return run


def diffusion_steps(engine: DecodingEngine, batch: dict, cfg: DecodeConfig,
                    language: AnswerLanguage | None = None) -> DiffusionSteps:
    """The steps of the block-diffusion state that a greedy decode of ``batch`` (encoded
    prompts) with ``cfg`` and ``language`` on ``engine`` (a diffusion model's) builds; the
    decode runs here."""
    cfg, rows, auto = _decoded(engine, batch, cfg, language)
    runner = engine.runner
    block = cfg.block_size or engine.model.fields.block_size
    state = _existing(runner, lambda: fast._state(runner, batch, cfg, block, rows, True, auto))
    return DiffusionSteps(state, rows, cfg.max_new_tokens)


def ar_step(engine: DecodingEngine, batch: dict, cfg: DecodeConfig,
            language: AnswerLanguage | None = None) -> Step:
    """One token step of the next-token state that a greedy decode of ``batch`` with
    ``cfg`` on ``engine`` (a next-token model's) builds, host attention plan included: the
    k-th call feeds answer offset k - 1 again, so up to ``cfg.max_new_tokens - 1`` calls fit
    the state's cache. The decode runs here."""
    cfg, rows, auto = _decoded(engine, batch, cfg, language)
    runner = engine.runner
    key = ("ar", runner.bucket(rows), True) + ((auto.language,) if auto else ())
    state = _existing(runner, lambda: runner.states[key])
    lengths = [int(n) for n in state.base.tolist()]         # prompt lengths, padding rows 0
    calls = [0]

    def run() -> None:
        calls[0] += 1
        state.attn.plan([n + calls[0] for n in lengths])
        state.run_step(0.0, None, rows)
    state.c.zero_()
    return run


@dataclass
class VerifySteps:
    """Exact mode's verify state as a decode left it (``verify_steps``)."""
    verify: Step      # one verify step: the verifier's forward, its choices and acceptance
    rewind: Step      # every row back to answer offset 0, none done: what a verify reads
    width: int        # the positions a verify reads


def verify_steps(engine: DecodingEngine, batch: dict, cfg: DecodeConfig,
                 language: AnswerLanguage | None = None) -> VerifySteps:
    """The verify step of the exact-mode state pair that a decode of ``batch`` with ``cfg``
    (``mode="exact"``) on ``engine`` builds; the decode runs here."""
    if cfg.mode != "exact":
        raise ValueError("verify steps need an exact-mode decode (cfg.mode='exact')")
    cfg, _, auto = _decoded(engine, batch, cfg, language)
    runner, verifier = engine.runner, engine.verifier_runner
    block = cfg.block_size or engine.model.fields.block_size
    width = engine.exact.resolved(block, runner.device).verify_width
    state = _existing(verifier, lambda: fast_exact._states(
        runner, verifier, batch, cfg, block, width, auto)[1])
    where = state.rows                       # the decode's rows, which a verify reads

    def rewind() -> None:
        where.pos.zero_()
        where.draft_start.zero_()
        where.done.zero_()
    return VerifySteps(state.verify, rewind, width)
