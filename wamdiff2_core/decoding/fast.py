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

import torch

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
from wamdiff2_core.model.prompt import prepare_prompt


class DiffusionState:
    """Static cache, input/output buffers and the compiled or captured steps of one
    (batch bucket, block size, commit rule, greedy?, fused commit?, language) shape.

    The inputs are two blocks wide: the right half is the block being denoised (``x``,
    ``cos``, ``sin``, ``slots`` are views of it), the left half the block finished before it.
    With ``fuse`` the first step of a block runs both halves (``first``): the finished
    block's clean keys/values are committed in the same forward that denoises the new
    block. Otherwise a separate ``commit`` pass runs the finished block alone.

    What is compiled or captured (each a fixed-shape step over these buffers): greedy and
    unconstrained, the whole step (``forward`` then ``select``) as one piece per ``first``;
    otherwise the ``forward`` per ``first``, then ``select`` on its output: captured per
    ``last`` when greedy (the constrained step's last fills every position, a different
    computation), eager when sampling (the reference's random stream, on the real rows)."""

    def __init__(self, runner: FastRunner, batch: int, block_size: int, rule: str,
                 greedy: bool, max_len: int, fuse: bool, auto: DeviceAutomaton | None = None):
        self.text, dev = runner.text, runner.device
        f = runner.model.fields
        self.mask_id, self.eoa, self.shifted = f.mask_token_id, f.eoa_token_id, f.shift
        self.rule, self.block_size, self.greedy, self.fuse = rule, block_size, greedy, fuse
        self.batch = batch
        self.cons = auto and FastConstraint(auto, batch, block_size, self.mask_id, self.eoa)
        self.cache = self.text.new_cache(batch, max_len)
        self.attn = runner.new_attention(batch, block_size, max_len)
        self.attn_prev = runner.new_attention(batch, block_size, max_len) if fuse else self.attn
        long = dict(dtype=torch.long, device=dev)
        width = 2 * block_size
        self.x2 = torch.full((batch, width), self.mask_id, **long)             # (Bb, 2K)
        self.cos2 = torch.zeros(batch, width, self.text.head_dim, dtype=self.text.dtype,
                                device=dev)                                    # (Bb, 2K, D)
        self.sin2 = torch.zeros_like(self.cos2)                                # (Bb, 2K, D)
        self.slots2 = torch.arange(width, **long).repeat(batch, 1)             # (Bb, 2K)
        self.x, self.cos, self.sin, self.slots = (t[:, block_size:] for t in
                                                  (self.x2, self.cos2, self.sin2, self.slots2))
        self.kv_len = torch.full((batch,), width, **long)                      # (Bb,)
        self.kv_len_prev = torch.full((batch,), block_size, **long)            # (Bb,)
        self.prefix = Prefix(block_size, self.kv_len_prev, self.attn_prev)
        self.step = torch.zeros(1, **long)                   # steps taken in this block
        self.sched = torch.ones(block_size, **long)          # commit quota per step (static rules)
        self.n_steps = torch.full((1,), block_size, **long)  # the block's step budget
        self.threshold = torch.full((), 0.9, dtype=torch.float32, device=dev)
        self.pending = torch.ones((), dtype=torch.bool, device=dev)
        self.conf = torch.zeros(batch, block_size, dtype=torch.float32, device=dev)  # (Bb, K)
        vocab = self.text.lm_head.weight.shape[0]
        self.carry = torch.zeros(batch, 1, vocab, dtype=self.text.dtype, device=dev) \
            if self.shifted else None                                          # (Bb, 1, V)

        def make(fn):
            return STEP_MODES[runner.mode](fn, pool=runner.pool, device=dev)

        self.attn.plan([width] * batch)      # a plan must exist before warm-up / capture
        if fuse:
            self.attn_prev.plan([block_size] * batch)
        firsts = (False, True) if fuse else (False,)
        if greedy and not self.cons:
            self.steps = {first: make(lambda first=first: self.select(
                self.forward(first), None, 0.0, None, batch)) for first in firsts}
        else:
            self.forwards = {first: make(lambda first=first: self.forward(first))
                             for first in firsts}
            if greedy:
                self.selects = {last: make(lambda last=last: self.select(
                    self.cons.col_logits, last, 0.0, None, batch)) for last in (False, True)}
        if not fuse:
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
        text, k = self.text, self.block_size
        if first:
            out = text.forward(self.x2, self.cos2, self.sin2, self.slots2, self.kv_len,
                               self.cache, self.attn, prefix=self.prefix,
                               keep_prefix=self.shifted)                # (Bb, 2K or K, V)
            if self.shifted:
                self.carry.copy_(out[:, k - 1:k])
                out = out[:, k - 1:2 * k - 1]
        else:
            out = text.forward(self.x, self.cos, self.sin, self.slots, self.kv_len,
                               self.cache, self.attn)                   # (Bb, K, V)
            if self.shifted:
                out = torch.cat((self.carry, out[:, :-1]), 1)
        return self.cons.take_logits(out) if self.cons else out

    def select(self, logits: torch.Tensor, last: bool | None, temperature: Temperature,
               gen, rows: int) -> None:
        """Choose tokens for the first ``rows`` rows of ``logits`` (greedy at temperature 0,
        else sampled from ``gen``; a per-row temperature tensor mixes both), commit them by
        the rule (or the constrained step, whose ``last`` is known on the host), write them
        back into ``x`` and their confidences into ``conf``; sync-free."""
        x = self.x[:rows]                                                      # view (R, K)
        masked = x == self.mask_id                                             # (R, K)
        quota = self.sched.gather(0, self.step.clamp(max=self.block_size - 1))  # (1,)
        if self.cons:
            self.cons.step(x, logits[:rows], self.rule, quota, last, self.threshold,
                           temperature, gen)
            conf = sets.token_probability(self.cons.auto, logits[:rows], x)
        else:
            tokens, conf = choose_tokens(logits[:rows], self.mask_id, temperature, gen)
            # the budget's last step as a device flag: a captured step reads no host value
            last_step = self.step == self.n_steps - 1                          # (1,)
            commit = commit_mask(self.rule, conf, masked, quota, last_step, self.threshold)
            x.copy_(torch.where(commit, tokens, x))
        committed = masked & (x != self.mask_id)                   # this step's commits
        self.conf[:rows].copy_(torch.where(committed, conf, self.conf[:rows]))
        self.step.add_(1)
        self.pending.copy_(unsettled(self.x, self.mask_id, self.eoa).any())

    # ------------------------------------------------------------------ between blocks
    def commit_pass(self) -> None:
        """The finished block's clean keys/values into the cache (unfused); a shifted
        model keeps its last row's logits."""
        out = self.text.forward(self.x, self.cos, self.sin, self.slots, self.kv_len,
                                self.cache, self.attn, logits=self.shifted)
        if self.shifted:
            self.carry.copy_(out[:, -1:])

    def shift(self) -> None:
        """The finished block becomes the left half (to be committed by the fused step)."""
        k = self.block_size
        for t in (self.x2, self.cos2, self.sin2, self.slots2):
            t[:, :k].copy_(t[:, k:])
        self.kv_len_prev.copy_(self.kv_len)


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
    model, dev = runner.model, runner.device
    with runner.no_autograd():
        block_size = cfg.block_size or model.fields.block_size
        schedule = transfer_schedule(block_size, cfg.steps_per_block or block_size)
        eoa = model.fields.eoa_token_id
        n_blocks = -(-cfg.max_new_tokens // block_size)
        gen = torch.Generator(device=model.device).manual_seed(cfg.seed)
        prompts = batch["input_ids"].shape[0]
        rows = prompts if temperatures is None else len(temperatures)
        stats = DecodeStats(batch=rows)
        bb = runner.bucket(rows)
        greedy = cfg.temperature == 0 if temperatures is None else max(temperatures) == 0
        temperature = cfg.temperature if temperatures is None else \
            torch.tensor(temperatures, dtype=torch.float32, device=dev)          # (R,)
        needed = batch["input_ids"].shape[1] + n_blocks * block_size
        key = ("diffusion", bb, block_size, cfg.commit_rule, greedy, runner.fuse_commit) + \
            ((auto.language,) if auto else ())
        st: DiffusionState = runner.state(key, needed, lambda length: DiffusionState(
            runner, bb, block_size, cfg.commit_rule, greedy, length, runner.fuse_commit,
            auto))

        t0 = time.perf_counter()
        prompt = prepare_prompt(model, batch, block_size)
        dyn, last_logits, lengths = runner.prefill(prompt)
        st.cache.load_prefill(dyn, lengths)
        if rows != prompts:                              # copies: one prefill, rows of it
            st.cache.kv[:, :, 1:rows].copy_(st.cache.kv[:, :, :1].expand(
                -1, -1, rows - 1, -1, -1, -1))
            prompt, lengths = repeat_prompt(prompt, rows), lengths * rows
            last_logits = last_logits.expand(rows, -1, -1)
        if st.shifted:
            st.carry.zero_()
            st.carry[:rows].copy_(last_logits)
        base = runner.row_lengths(lengths, bb)                                     # (Bb,)
        cos_all, sin_all = runner.rope_rows(prompt, bb, n_blocks * block_size)    # (Bb, N, D)
        st.sched[:len(schedule)] = torch.tensor(schedule)
        st.n_steps.fill_(len(schedule))
        st.threshold.fill_(cfg.threshold)
        if st.cons:
            st.cons.start(cfg.max_new_tokens, rows)
        finished = torch.arange(bb, device=dev) >= rows                           # padding: done
        out = torch.full((bb, n_blocks * block_size), eoa, dtype=torch.long, device=dev)
        conf = torch.zeros(bb, n_blocks * block_size, dtype=torch.float32, device=dev)
        positions = torch.arange(block_size, device=dev)
        sync(dev)
        stats.prefill_ms = (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        lens: list[int] = []
        for b in range(n_blocks):
            off = b * block_size
            fused = st.fuse and b > 0                    # this block's first step commits b - 1
            if fused:
                st.shift()
                st.attn_prev.plan(lens)
            st.x.copy_(torch.where(finished.unsqueeze(-1), eoa, st.mask_id)
                       .expand(-1, block_size))
            st.cos.copy_(cos_all[:, off:off + block_size])
            st.sin.copy_(sin_all[:, off:off + block_size])
            st.slots.copy_(base.unsqueeze(-1) + off + positions)
            st.kv_len.copy_(base + off + block_size)
            st.step.zero_()
            st.conf.zero_()
            if st.cons:
                st.cons.begin_block(off)
            lens = [n + off + block_size for n in lengths] + [off + block_size] * (bb - rows)
            st.attn.plan(lens)
            done_steps = 0
            while done_steps < len(schedule):
                for _ in range(min(runner.sync_every, len(schedule) - done_steps)):
                    check_cancel(stats.forwards + stats.denoise_forwards + done_steps)
                    st.run_step(temperature, gen, rows, first=fused and done_steps == 0,
                                last=done_steps == len(schedule) - 1)
                    done_steps += 1
                if not bool(st.pending):                     # the done-check: every sync_every
                    break
            stats.denoise_forwards += done_steps
            out[:, off:off + block_size] = st.x
            conf[:, off:off + block_size] = st.conf
            stats.blocks += 1
            finished |= (st.x == eoa).any(-1)
            if bool(finished.all()) or b == n_blocks - 1:
                break
            if not st.fuse:
                check_cancel(stats.forwards + stats.denoise_forwards)
                st.commit()
                stats.forwards += 1
        stats.forwards += stats.denoise_forwards
        sync(dev)
        stats.decode_ms = (time.perf_counter() - t0) * 1e3
        done = stats.blocks * block_size
        return finish_rows(out[:rows, :done][:, :cfg.max_new_tokens], eoa, stats,
                           conf[:rows, :done][:, :cfg.max_new_tokens])
