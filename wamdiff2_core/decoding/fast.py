"""The fast block-diffusion decoder: static KV cache, fixed-shape steps, no host sync inside a
step, CUDA graphs on a GPU (eager or ``torch.compile`` on a CPU). Token for token the same
answers as ``reference.diffusion_decode`` (tests check it).

Per block (B rows padded to a batch bucket, K positions):

    host: the block just finished moves to the left half of the two-block inputs; x <- mask
          ids (eoa for finished rows); rotary, slots and key lengths of the block; attention
          plans (FlashInfer only)
    first step (replayed): forward of [finished block | x] against the cache: both blocks'
          K/V written at their slots, the finished block's clean K/V committed, logits for
          x only; then as every step below (the first block has no finished block: a step)
    step (replayed): forward of x against the cache (its K/V written at the block's slots),
          greedy choice and fp32 confidences, the commit rule with masks and ``where``,
          x <- where(commit, tokens, x), step += 1, pending <- any masked position before
          a row's end-of-answer token (``remasking.unsettled``)
    host: read ``pending`` every ``sync_every`` steps; stop when no answer of the block can
          change any more or the step budget is spent; stop decoding after the last block or when every row ended

The block's noisy K/V are written at its own slots during the steps (scratch that its commit
overwrites), which is exactly the reference's "block against the cache, then crop". With
``FastConfig(fuse_commit=False)`` a separate commit pass (replayed) writes the finished
block's clean K/V instead, as the reference does. With temperature > 0 the forward is still
captured; choosing tokens runs eagerly on the real rows with the reference's random stream,
so sampled answers match too.

A shifted model (``fields.shift``) reads position i's prediction at position i - 1: the step
uses ``[carry | logits[:-1]]``, where ``carry`` (Bb, 1, V) holds the logits of the last
position before the block: the prefill's last, then the commit's last row (the fused first
step keeps the finished block's rows through the last layer for it, the separate commit
pass computes its logits).
"""
from __future__ import annotations

import time

import torch

from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.constraints.session import FastConstraint
from wamdiff2_core.decoding.graphs import STEP_MODES
from wamdiff2_core.decoding.output import DecodeOutput, DecodeStats, finish_rows
from wamdiff2_core.decoding.remasking import commit_mask, transfer_schedule, unsettled
from wamdiff2_core.decoding.runner import FastRunner, sync
from wamdiff2_core.decoding.sampling import choose_tokens
from wamdiff2_core.decoding.static_model import Prefix
from wamdiff2_core.model.prompt import prepare_prompt


class DiffusionState:
    """Static cache, input/output buffers and the compiled or captured steps of one
    (batch bucket, block size, commit rule, greedy?, fused commit?) shape.

    The inputs are two blocks wide: the right half is the block being denoised (``x``,
    ``cos``, ``sin``, ``slots`` are views of it), the left half the block finished before it.
    With ``fuse`` the first step of a block runs both halves (``first``): the finished
    block's clean keys/values are committed in the same forward that denoises the new
    block. Otherwise a separate ``commit`` pass runs the finished block alone."""

    def __init__(self, runner: FastRunner, batch: int, block: int, rule: str, greedy: bool,
                 max_len: int, fuse: bool, auto: DeviceAutomaton | None = None):
        text, dev = runner.text, runner.device
        f = runner.model.fields
        self.mask_id, self.eoa = f.mask_token_id, f.eoa_token_id
        self.rule, self.block, self.greedy, self.fuse = rule, block, greedy, fuse
        # constrained: the forward keeps the language's logit columns; the constrained
        # selection (one step for the last step of the budget, one for the others) is
        # compiled or captured on its own
        self.cons = auto and FastConstraint(auto, batch, block, self.mask_id, self.eoa)
        self.cache = text.new_cache(batch, max_len)
        self.attn = runner.new_attention(batch, block, max_len)
        self.attn_prev = runner.new_attention(batch, block, max_len) if fuse else self.attn
        long = dict(dtype=torch.long, device=dev)
        self.x2 = torch.full((batch, 2 * block), self.mask_id, **long)         # (Bb, 2K)
        self.cos2 = torch.zeros(batch, 2 * block, text.head_dim, dtype=text.dtype, device=dev)
        self.sin2 = torch.zeros_like(self.cos2)                                # (Bb, 2K, D)
        self.slots2 = torch.arange(2 * block, **long).repeat(batch, 1)         # (Bb, 2K)
        self.x, self.cos, self.sin, self.slots = (t[:, block:] for t in
                                                  (self.x2, self.cos2, self.sin2, self.slots2))
        self.kv_len = torch.full((batch,), 2 * block, **long)                  # (Bb,)
        self.kv_len_prev = torch.full((batch,), block, **long)                 # (Bb,)
        self.step = torch.zeros(1, **long)
        self.sched = torch.ones(block, **long)       # commit quota per step (static rules)
        self.n_steps = torch.full((1,), block, **long)
        self.threshold = torch.full((), 0.9, dtype=torch.float32, device=dev)
        self.pending = torch.ones((), dtype=torch.bool, device=dev)
        prefix = Prefix(block, self.kv_len_prev, self.attn_prev)
        self.shifted = f.shift
        vocab = text.lm_head.weight.shape[0]
        self.carry = torch.zeros(batch, 1, vocab, dtype=text.dtype, device=dev) \
            if self.shifted else None                                          # (Bb, 1, V)

        def forward():
            out = text.forward(self.x, self.cos, self.sin, self.slots, self.kv_len,
                               self.cache, self.attn)                           # (Bb, K, V)
            return torch.cat((self.carry, out[:, :-1]), 1) if self.shifted else out

        def forward_first():
            out = text.forward(self.x2, self.cos2, self.sin2, self.slots2, self.kv_len,
                               self.cache, self.attn, prefix=prefix,
                               keep_prefix=self.shifted)           # (Bb, 2K or K, V)
            if not self.shifted:
                return out
            self.carry.copy_(out[:, block - 1:block])
            return out[:, block - 1:2 * block - 1]

        def commit():
            out = text.forward(self.x, self.cos, self.sin, self.slots, self.kv_len,
                               self.cache, self.attn, logits=self.shifted)
            if self.shifted:
                self.carry.copy_(out[:, -1:])

        def denoise(fwd):
            if self.cons:
                return lambda: self.cons.take_logits(fwd())
            return lambda: self.select(fwd(), 0.0, None, batch)

        make = STEP_MODES[runner.mode]
        self.attn.plan([2 * block] * batch)  # a plan must exist before warm-up / capture
        self.denoise = make(denoise(forward) if greedy else forward, pool=runner.pool,
                            device=dev)
        if fuse:
            self.attn_prev.plan([block] * batch)
            self.first = make(denoise(forward_first) if greedy else forward_first,
                              pool=runner.pool, device=dev)
        else:
            self.commit = make(commit, pool=runner.pool, device=dev)
        if self.cons and greedy:
            self.cselect = {last: make(lambda last=last: self.select_constrained(
                self.cons.col_logits, 0.0, None, batch, last), pool=runner.pool, device=dev)
                for last in (False, True)}

    def shift(self) -> None:
        """The finished block becomes the left half (to be committed by the fused step)."""
        k = self.block
        for t in (self.x2, self.cos2, self.sin2, self.slots2):
            t[:, :k].copy_(t[:, k:])
        self.kv_len_prev.copy_(self.kv_len)

    def select(self, logits: torch.Tensor, temperature: float, gen, rows: int) -> None:
        """Choose tokens for the first ``rows`` rows and commit them by the rule; sync-free."""
        x = self.x[:rows]                                                      # view (R, K)
        masked = x == self.mask_id
        tokens, conf = choose_tokens(logits[:rows], self.mask_id, temperature, gen)
        quota = self.sched.gather(0, self.step.clamp(max=self.block - 1))      # (1,)
        last = self.step == self.n_steps - 1                                   # (1,)
        commit = commit_mask(self.rule, conf, masked, quota, last, self.threshold)
        x.copy_(torch.where(commit, tokens, x))
        self.step.add_(1)
        self.pending.copy_(unsettled(self.x, self.mask_id, self.eoa).any())

    def select_constrained(self, col_logits: torch.Tensor, temperature: float, gen,
                           rows: int, last: bool) -> None:
        """``select`` under the answer's language (``constraints.step.fast_step``)."""
        quota = self.sched.gather(0, self.step.clamp(max=self.block - 1))      # (1,)
        self.cons.step(self.x[:rows], col_logits[:rows], self.rule, quota, last,
                       self.threshold, temperature, gen)
        self.step.add_(1)
        self.pending.copy_(unsettled(self.x, self.mask_id, self.eoa).any())

    def run_step(self, temperature: float, gen, rows: int, first: bool = False,
                 last: bool = False) -> None:
        """One denoising step; ``first``: the fused step that also commits the block before;
        ``last``: the last step of the block's budget."""
        out = (self.first if first else self.denoise)()
        if self.cons and self.greedy:
            self.cselect[last]()
        elif self.cons:
            self.select_constrained(self.cons.take_logits(out), temperature, gen, rows, last)
        elif not self.greedy:
            self.select(out, temperature, gen, rows)


@torch.no_grad()
def decode(runner: FastRunner, batch: dict, cfg: DecodeConfig,
           auto: DeviceAutomaton | None = None) -> DecodeOutput:
    """Block-diffusion decode of an encoded prompt batch with ``cfg`` as resolved
    (``config.resolve_decode``); same tokens as the reference. With ``auto``, every answer
    is a word of its language. ``engine.DecodingEngine.decode`` is the caller."""
    model = runner.model
    with runner.no_autograd():
        k = cfg.block_size or model.fields.block_size
        schedule = transfer_schedule(k, cfg.steps_per_block or k)
        eoa = model.fields.eoa_token_id
        n_blocks = -(-cfg.max_new_tokens // k)
        gen = torch.Generator(device=model.device).manual_seed(cfg.seed)
        rows = batch["input_ids"].shape[0]
        stats = DecodeStats(batch=rows)
        bb = runner.bucket(rows)
        greedy = cfg.temperature == 0
        needed = batch["input_ids"].shape[1] + n_blocks * k
        fuse = runner.fuse_commit
        key = ("diffusion", bb, k, cfg.commit_rule, greedy, fuse) + \
            ((auto.language,) if auto else ())
        st: DiffusionState = runner.state(key, needed, lambda length: DiffusionState(
            runner, bb, k, cfg.commit_rule, greedy, length, fuse, auto))

        t0 = time.perf_counter()
        prompt = prepare_prompt(model, batch, k)
        dyn, last_logits, lengths = runner.prefill(prompt)
        st.cache.load_prefill(dyn, lengths)
        if st.shifted:
            st.carry.zero_()
            st.carry[:rows].copy_(last_logits)
        base = runner.row_lengths(lengths, bb)                                     # (Bb,)
        cos_all, sin_all = runner.rope_rows(prompt, bb, n_blocks * k)             # (Bb, N, D)
        st.sched[:len(schedule)] = torch.tensor(schedule)
        st.n_steps.fill_(len(schedule))
        st.threshold.fill_(cfg.threshold)
        if st.cons:
            st.cons.start(cfg.max_new_tokens, rows)
        finished = torch.arange(bb, device=runner.device) >= rows                 # padding: done
        out = torch.full((bb, n_blocks * k), eoa, dtype=torch.long, device=runner.device)
        arange_k = torch.arange(k, device=runner.device)
        sync(runner.device)
        stats.prefill_ms = (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        lens: list[int] = []
        for b in range(n_blocks):
            off = b * k
            fused = st.fuse and b > 0                    # this block's first step commits b - 1
            if fused:
                st.shift()
                st.attn_prev.plan(lens)
            st.x.copy_(torch.where(finished.unsqueeze(-1), eoa, st.mask_id).expand(-1, k))
            st.cos.copy_(cos_all[:, off:off + k])
            st.sin.copy_(sin_all[:, off:off + k])
            st.slots.copy_(base.unsqueeze(-1) + off + arange_k)
            st.kv_len.copy_(base + off + k)
            st.step.zero_()
            if st.cons:
                st.cons.begin_block(off)
            lens = [n + off + k for n in lengths] + [off + k] * (bb - rows)
            st.attn.plan(lens)
            done_steps = 0
            while done_steps < len(schedule):
                for _ in range(min(runner.sync_every, len(schedule) - done_steps)):
                    st.run_step(cfg.temperature, gen, rows, first=fused and done_steps == 0,
                                last=done_steps == len(schedule) - 1)
                    done_steps += 1
                if not bool(st.pending):                     # the done-check: every sync_every
                    break
            stats.denoise_forwards += done_steps
            out[:, off:off + k] = st.x
            stats.blocks += 1
            finished |= (st.x == eoa).any(-1)
            if bool(finished.all()) or b == n_blocks - 1:
                break
            if not st.fuse:
                st.commit()
                stats.forwards += 1
        stats.forwards += stats.denoise_forwards
        sync(runner.device)
        stats.decode_ms = (time.perf_counter() - t0) * 1e3
        return finish_rows(out[:rows, :stats.blocks * k][:, :cfg.max_new_tokens], eoa, stats)
