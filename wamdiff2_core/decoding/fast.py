"""The fast block-diffusion decoder: static KV cache, fixed-shape steps, no host sync inside a
step, CUDA graphs on a GPU (eager or ``torch.compile`` on a CPU). Token for token the same
answers as ``reference.diffusion_decode`` (tests check it).

Per block (B rows padded to a batch bucket, K positions):

    host: the block just finished moves to the left half of the two-block inputs; x <- mask
          ids (eoa for finished rows); rotary, slots and key lengths of the block; attention
          plans (FlashInfer only)
    step (replayed): ``DiffusionState.run_step``, which reads top to bottom:
          forward of x against the cache (its K/V written at the block's slots; the first
              step of a block also commits the finished block's clean K/V, fused)
          choose tokens: greedy, or sampled from the reference's random stream; fp32
              confidences (``sampling.choose_tokens``)
          commit rule with masks and ``where`` (``remasking.commit_mask``), or the answer
              language's constrained step (``constraints.step.fast_step``)
          write back: x <- where(commit, tokens, x), step += 1, pending <- any masked
              position before a row's end-of-answer token (``remasking.unsettled``)
    host: read ``pending`` every ``sync_every`` steps; stop when no answer of the block can
          change any more or the step budget is spent; stop decoding after the last block
          or when every row ended

The block's noisy K/V are written at its own slots during the steps (scratch that its commit
overwrites), which is exactly the reference's "block against the cache, then crop". With
``FastConfig(fuse_commit=False)`` a separate commit pass (replayed) writes the finished
block's clean K/V instead, as the reference does.

A shifted model (``fields.shift``) reads position i's prediction at position i - 1: the step
uses ``[carry | logits[:-1]]``, where ``carry`` (Bb, 1, V) holds the logits of the last
position before the block: the prefill's last, then the commit's last row (the fused first
step keeps the finished block's rows through the last layer for it, the separate commit
pass computes its logits).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from wamdiff2_core.decoding.blocks import BlockInputs, BlockSchedule, run_block_steps
from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding.constraints import sets
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.constraints.session import FastConstraint
from wamdiff2_core.decoding.copies import repeat_prompt
from wamdiff2_core.decoding.graphs import STEP_MODES
from wamdiff2_core.decoding.output import DecodeOutput, DecodeStats, finish_rows
from wamdiff2_core.decoding.remasking import commit_mask, transfer_schedule, unsettled
from wamdiff2_core.decoding.runner import FastRunner, sync
from wamdiff2_core.decoding.sampling import Temperature, choose_tokens
from wamdiff2_core.decoding.static_model import Prefix
from wamdiff2_core.model.prompt import Prompt, prepare_prompt


class DiffusionState:
    """Static cache, buffers and the compiled or captured steps of one (batch bucket, block
    size, commit rule, greedy?, fused commit?, language) shape.

    The inputs are two blocks wide (``blocks.BlockInputs``): the right half is the block
    being denoised, the left half the block finished before it. With ``fuse`` the first step
    of a block runs both halves (``first``): the finished block's clean keys/values are
    committed in the same forward that denoises the new block. Otherwise a separate
    ``commit`` pass runs the finished block alone.

    What is compiled or captured (each a fixed-shape step over these buffers): greedy and
    unconstrained, the whole step (``forward`` then ``select``) as one piece per ``first``;
    otherwise the ``forward`` per ``first``, then ``select`` on its output: captured per
    ``last`` when greedy (the constrained step's last fills every position, a different
    computation), eager when sampling (the reference's random stream, on the real rows)."""

    def __init__(self, runner: FastRunner, batch: int, block_size: int, rule: str,
                 greedy: bool, max_len: int, fuse: bool, auto: DeviceAutomaton | None = None):
        self.text, device, fields = runner.text, runner.device, runner.model.fields
        self.mask_id, self.eoa, self.shifted = (fields.mask_token_id, fields.eoa_token_id,
                                                fields.shift)
        self.rule, self.block_size, self.greedy, self.fuse = rule, block_size, greedy, fuse
        self.batch = batch
        self.cons = auto and FastConstraint(auto, batch, block_size, self.mask_id, self.eoa)
        self.cache = self.text.new_cache(batch, max_len)
        self.attn = runner.new_attention(batch, block_size, max_len)
        self.attn_prev = runner.new_attention(batch, block_size, max_len) if fuse else self.attn
        self.inputs = BlockInputs.allocate(self.text, batch, block_size, self.mask_id)
        self.schedule = BlockSchedule.allocate(block_size, device)
        self.prefix = Prefix(block_size, self.inputs.kv_len_prev, self.attn_prev)
        self.conf = torch.zeros(batch, block_size, dtype=torch.float32,
                                device=device)                                 # (Bb, K)
        vocab = self.text.lm_head.weight.shape[0]
        self.carry = torch.zeros(batch, 1, vocab, dtype=self.text.dtype, device=device) \
            if self.shifted else None                                          # (Bb, 1, V)
        self._build_steps(runner)

    @property
    def x(self) -> torch.Tensor:
        """(Bb, K) the block being denoised."""
        return self.inputs.x

    @property
    def step(self) -> torch.Tensor:
        """(1,) steps taken in this block."""
        return self.schedule.step

    def _build_steps(self, runner: FastRunner) -> None:
        """Compile or capture the steps (after a first attention plan: warm-up and capture
        need one)."""
        def make(fn):
            return STEP_MODES[runner.mode](fn, pool=runner.pool, device=runner.device)

        batch, block = self.batch, self.block_size
        self.attn.plan([2 * block] * batch)
        if self.fuse:
            self.attn_prev.plan([block] * batch)
        firsts = (False, True) if self.fuse else (False,)
        if self.greedy and not self.cons:
            self.steps = {first: make(lambda first=first: self.select(
                self.forward(first), None, 0.0, None, batch)) for first in firsts}
        else:
            self.forwards = {first: make(lambda first=first: self.forward(first))
                             for first in firsts}
            if self.greedy:
                self.selects = {last: make(lambda last=last: self.select(
                    self.cons.col_logits, last, 0.0, None, batch)) for last in (False, True)}
        if not self.fuse:
            self.commit = make(self.commit_pass)

    # ------------------------------------------------------------------ one step
    def run_step(self, temperature: Temperature, gen, rows: int, first: bool = False,
                 last: bool = False) -> None:
        """One denoising step of the first ``rows`` rows: ``forward``, then ``select``
        (choose tokens, commit rule or constraints, write back). ``first``: the fused step
        that also commits the block before; ``last``: the last step of the block's
        budget."""
        if self.greedy and not self.cons:
            self.steps[first]()                          # forward + select, one replay
            return
        logits = self.forwards[first]()
        if self.greedy:
            self.selects[last]()                         # select on the kept columns
        else:
            self.select(logits, last, temperature, gen, rows)

    def forward(self, first: bool) -> torch.Tensor:
        """Logits (Bb, K, V) of the block being denoised, read as the model predicts them
        (a shifted model's from one position to the left); with ``first`` the finished
        block's commit rides along. Constrained: the language's columns (Bb, K, C)."""
        k = self.block_size
        if first:
            out = self.inputs.forward(self.text, self.cache, self.attn, self.prefix,
                                      keep_prefix=self.shifted)         # (Bb, 2K or K, V)
            if self.shifted:
                self.carry.copy_(out[:, k - 1:k])
                out = out[:, k - 1:2 * k - 1]
        else:
            out = self.inputs.forward(self.text, self.cache, self.attn)  # (Bb, K, V)
            if self.shifted:
                out = torch.cat((self.carry, out[:, :-1]), 1)
        return self.cons.take_logits(out) if self.cons else out

    def select(self, logits: torch.Tensor, last: bool | None, temperature: Temperature,
               gen, rows: int) -> None:
        """Choose tokens for the first ``rows`` rows of ``logits`` (greedy at temperature 0,
        else sampled from ``gen``; a per-row temperature tensor mixes both), commit them by
        the rule (or the constrained step, whose ``last`` is known on the host), write them
        back into ``x`` and their confidences into ``conf``; sync-free."""
        schedule = self.schedule
        x = self.x[:rows]                                                      # view (R, K)
        masked = x == self.mask_id                                             # (R, K)
        quota = schedule.quota()                                               # (1,)
        if self.cons:
            self.cons.step(x, logits[:rows], self.rule, quota, last, schedule.threshold,
                           temperature, gen)
            conf = sets.token_probability(self.cons.auto, logits[:rows], x)
        else:
            tokens, conf = choose_tokens(logits[:rows], self.mask_id, temperature, gen)
            # the budget's last step as a device flag: a captured step reads no host value
            last_step = schedule.step == schedule.n_steps - 1                  # (1,)
            commit = commit_mask(self.rule, conf, masked, quota, last_step,
                                 schedule.threshold)
            x.copy_(torch.where(commit, tokens, x))
        committed = masked & (x != self.mask_id)                   # this step's commits
        self.conf[:rows].copy_(torch.where(committed, conf, self.conf[:rows]))
        schedule.step.add_(1)
        schedule.pending.copy_(unsettled(self.x, self.mask_id, self.eoa).any())

    # ------------------------------------------------------------------ between blocks
    def commit_pass(self) -> None:
        """The finished block's clean keys/values into the cache (unfused); a shifted
        model keeps its last row's logits."""
        out = self.inputs.forward(self.text, self.cache, self.attn, logits=self.shifted)
        if self.shifted:
            self.carry.copy_(out[:, -1:])

    def shift(self) -> None:
        """The finished block becomes the left half (to be committed by the fused step)."""
        self.inputs.shift(self.inputs.slots)
        self.inputs.kv_len_prev.copy_(self.inputs.kv_len)


@dataclass
class _Decode:
    """What one decode call holds beside its state: the rows, the per-row tables of the
    answer positions and the outputs (Bb = the state's batch bucket, R real rows)."""
    rows: int                     # R
    prompt_lengths: list[int]     # each real row's prompt length
    base: torch.Tensor            # (Bb,) prompt lengths on the device (padding rows: 0)
    cos: torch.Tensor             # (Bb, N, D) rotary rows of answer offsets 0..N-1
    sin: torch.Tensor             # (Bb, N, D)
    finished: torch.Tensor        # (Bb,) bool: the row ended (padding rows from the start)
    out: torch.Tensor             # (Bb, N) the answers
    conf: torch.Tensor            # (Bb, N) the confidence of each committed token
    positions: torch.Tensor       # (K,) 0..K-1, a block's positions


def _state(runner: FastRunner, batch: dict, cfg: DecodeConfig, block_size: int,
           rows: int, greedy: bool, auto: DeviceAutomaton | None) -> DiffusionState:
    """The runner's state for this decode's shape, built (or grown) on first use."""
    bucket = runner.bucket(rows)
    n_blocks = -(-cfg.max_new_tokens // block_size)
    needed = batch["input_ids"].shape[1] + n_blocks * block_size
    key = ("diffusion", bucket, block_size, cfg.commit_rule, greedy, runner.fuse_commit) + \
        ((auto.language,) if auto else ())
    return runner.state(key, needed, lambda length: DiffusionState(
        runner, bucket, block_size, cfg.commit_rule, greedy, length, runner.fuse_commit,
        auto))


def _prefill(runner: FastRunner, state: DiffusionState, prompt: Prompt, rows: int,
             answer_len: int) -> _Decode:
    """The prompt's keys/values into the state's cache (one prefill copied to ``rows`` rows
    when the batch is one prompt of several rows), a shifted model's first carry, and the
    decode's tables and outputs."""
    keys_values, last_logits, lengths = runner.prefill(prompt)
    state.cache.load_prefill(keys_values, lengths)
    if rows != prompt.batch:                             # copies: one prefill, rows of it
        state.cache.kv[:, :, 1:rows].copy_(state.cache.kv[:, :, :1].expand(
            -1, -1, rows - 1, -1, -1, -1))
        prompt, lengths = repeat_prompt(prompt, rows), lengths * rows
        last_logits = last_logits.expand(rows, -1, -1)
    if state.shifted:
        state.carry.zero_()
        state.carry[:rows].copy_(last_logits)
    bucket, device = state.batch, runner.device
    cos, sin = runner.rope_rows(prompt, bucket, answer_len)                 # (Bb, N, D)
    return _Decode(rows, lengths, runner.row_lengths(lengths, bucket), cos, sin,
                   finished=torch.arange(bucket, device=device) >= rows,   # padding: done
                   out=torch.full((bucket, answer_len), state.eoa, dtype=torch.long,
                                  device=device),
                   conf=torch.zeros(bucket, answer_len, dtype=torch.float32, device=device),
                   positions=torch.arange(state.block_size, device=device))


def _begin_block(state: DiffusionState, run: _Decode, offset: int, fused: bool,
                 planned: list[int]) -> list[int]:
    """Fill the inputs of the block at answer ``offset``: the finished block moved left
    (``fused``), mask ids (end-of-answer for rows that ended), its rotary rows, slots and
    key lengths, the attention plans; returns the key lengths planned (host list)."""
    k, inputs = state.block_size, state.inputs
    if fused:
        state.shift()
        state.attn_prev.plan(planned)
    inputs.x.copy_(torch.where(run.finished.unsqueeze(-1), state.eoa, state.mask_id)
                   .expand(-1, k))
    inputs.cos.copy_(run.cos[:, offset:offset + k])
    inputs.sin.copy_(run.sin[:, offset:offset + k])
    inputs.slots.copy_(run.base.unsqueeze(-1) + offset + run.positions)
    inputs.kv_len.copy_(run.base + offset + k)
    state.schedule.step.zero_()
    state.conf.zero_()
    if state.cons:
        state.cons.begin_block(offset)
    planned = [n + offset + k for n in run.prompt_lengths] + \
        [offset + k] * (state.batch - run.rows)
    state.attn.plan(planned)
    return planned


def _end_block(state: DiffusionState, run: _Decode, offset: int) -> bool:
    """The block's tokens and confidences into the outputs; whether every row has ended."""
    k = state.block_size
    run.out[:, offset:offset + k] = state.x
    run.conf[:, offset:offset + k] = state.conf
    run.finished |= (state.x == state.eoa).any(-1)
    return bool(run.finished.all())


@torch.no_grad()
def decode(runner: FastRunner, batch: dict, cfg: DecodeConfig,
           auto: DeviceAutomaton | None = None,
           temperatures: list[float] | None = None) -> DecodeOutput:
    """Block-diffusion decode of an encoded prompt batch with ``cfg`` as resolved
    (``config.resolve_decode``); same tokens as the reference. With ``auto``, every answer
    is a word of its language. ``temperatures``: one per row, replacing ``cfg.temperature``
    (0: greedy); given for a batch of ONE prompt, the prompt is prefilled once and its cache
    copied to ``len(temperatures)`` rows (``copies``). ``engine.DecodingEngine.decode`` is
    the caller."""
    model, device = runner.model, runner.device
    with runner.no_autograd():
        block_size = cfg.block_size or model.fields.block_size
        quotas = transfer_schedule(block_size, cfg.steps_per_block or block_size)
        n_blocks = -(-cfg.max_new_tokens // block_size)
        gen = torch.Generator(device=model.device).manual_seed(cfg.seed)
        rows = batch["input_ids"].shape[0] if temperatures is None else len(temperatures)
        greedy = cfg.temperature == 0 if temperatures is None else max(temperatures) == 0
        temperature = cfg.temperature if temperatures is None else \
            torch.tensor(temperatures, dtype=torch.float32, device=device)       # (R,)
        state = _state(runner, batch, cfg, block_size, rows, greedy, auto)
        stats = DecodeStats(batch=rows)

        t0 = time.perf_counter()
        run = _prefill(runner, state, prepare_prompt(model, batch, block_size), rows,
                       n_blocks * block_size)
        state.schedule.load(quotas, cfg.threshold)
        if state.cons:
            state.cons.start(cfg.max_new_tokens, rows)
        sync(device)
        stats.prefill_ms = (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        planned: list[int] = []
        for block in range(n_blocks):
            offset, fused = block * block_size, state.fuse and block > 0  # fused: commits b - 1
            planned = _begin_block(state, run, offset, fused, planned)
            stats.denoise_forwards += run_block_steps(
                lambda step: state.run_step(temperature, gen, rows, first=fused and step == 0,
                                            last=step == len(quotas) - 1),
                len(quotas), runner.sync_every, state.schedule.pending,
                stats.forwards + stats.denoise_forwards)
            stats.blocks += 1
            if _end_block(state, run, offset) or block == n_blocks - 1:
                break
            if not state.fuse:
                check_cancel(stats.forwards + stats.denoise_forwards)
                state.commit()
                stats.forwards += 1
        stats.forwards += stats.denoise_forwards
        sync(device)
        stats.decode_ms = (time.perf_counter() - t0) * 1e3
        done = stats.blocks * block_size
        n = cfg.max_new_tokens
        return finish_rows(run.out[:rows, :done][:, :n], state.eoa, stats,
                           run.conf[:rows, :done][:, :n])
