"""The fast exact decoder: ``exact.exact_decode``'s rounds (the diffusion model drafts a block,
causal verifier forwards accept the longest prefix equal to the verifier's greedy choices plus
its next token) with static KV caches, fixed-shape steps that never make the host wait, and
CUDA graphs on a GPU (eager or ``torch.compile`` on a CPU). Token for token the reference's
answers, with the same drafts, which are the verifier's greedy answers (tests check both).

Each row keeps its answer offset ``pos`` and its last draft's offset ``p0`` on the device, so
rows that accept different counts never make the host read them: every input of a step
(rotary rows, cache slots, key lengths, the tokens a verify reads) is gathered at them
inside the step. A round:

    begin (replayed, when a new draft is due): the last draft moves to the left half of the
        drafter's two-block inputs, its rejected positions pointed at scratch slots past the
        end of the cache (which no key length reaches); the new block [g, mask, ...] and
        its rotary rows, slots and key lengths go to the right half
    draft (replayed, at most ``draft_steps`` times): forward of the block against the
        drafter's cache, greedy tokens and the commit rule (or the constrained step), as the
        diffusion decoder's step; the first also commits the accepted part of the last draft
        (``Prefix``: one forward of both halves)
    verify (replayed once): the tokens to read (``verify.verify_input``), a causal forward of
        them against the verifier's cache, its choices (``verify.greedy_choice``),
        ``verify.accept``, the answer written, ``pos`` advanced, the flags set
    host: read the flags (a new draft due? every row done?) once per round and ``pending``
        (a masked position left) every ``sync_every`` draft steps

The verifier's cache needs no crop: its next forward writes at the slots after the accepted
ones and no key length reaches the rejected ones. Attention is SDPA with the key lengths read
on the device (FlashInfer plans key lengths on the host, which would need ``pos`` there).
"""
from __future__ import annotations

import time

import torch

from wamdiff2_core.decoding.attention import SdpaAttention
from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, resolve_decode
from wamdiff2_core.decoding.constraints import sets, step as cstep
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.exact import check_exact
from wamdiff2_core.decoding.graphs import STEP_MODES
from wamdiff2_core.decoding.output import DecodeOutput, finish_rows
from wamdiff2_core.decoding.remasking import commit_mask, transfer_schedule, unsettled
from wamdiff2_core.decoding.runner import FastRunner, sync
from wamdiff2_core.decoding.sampling import choose_tokens
from wamdiff2_core.decoding.static_model import Prefix
from wamdiff2_core.decoding.verify import (ExactStats, accept, check_verifier,
                                           greedy_choice, guesses, needs_draft,
                                           path_states, row_budget, take_choices,
                                           verify_input)
from wamdiff2_core.model.prompt import prepare_prompt


class CausalSdpaAttention(SdpaAttention):
    """SDPA for a block of ``qo_len`` queries that reads causally: query i of a row sees
    the first ``kv_len - (qo_len - 1 - i)`` slots (the block's own keys are its last
    ``qo_len``), as ``qo_len`` next-token forwards would."""

    def __init__(self, num_q_heads: int, num_kv_heads: int, head_dim: int, scale: float,
                 qo_len: int, **_):
        super().__init__(num_q_heads, num_kv_heads, head_dim, scale, trim=False)
        self.qo_len = qo_len

    def metadata(self, kv_len: torch.Tensor, max_len: int) -> torch.Tensor:
        """(B, 1, rep * W, L) bool, the query axis grouped as ``SdpaAttention`` packs it
        (query head r of a key head at r * W + i)."""
        w = self.qo_len
        seen = kv_len.unsqueeze(-1) - (w - 1 - torch.arange(w, device=kv_len.device))  # (B, W)
        mask = torch.arange(max_len, device=kv_len.device) < seen.unsqueeze(-1)  # (B, W, L)
        return mask.repeat(1, self.hq // self.hkv, 1).unsqueeze(1)


def _rows(table: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows ``offsets`` (B, N) of per-row tables (B, T, D) -> (B, N, D), on the device."""
    return table.gather(1, offsets.unsqueeze(-1).expand(-1, -1, table.shape[-1]))


class ExactState:
    """Both static caches, the buffers and the compiled or captured steps of one (batch
    bucket, block size, verify width, commit rule, fused commit?, language) shape. The
    drafter's inputs are two blocks wide: the right half is the last draft (``x``), the left
    half the draft before it, whose accepted part the fused first step commits."""

    def __init__(self, runner: FastRunner, verifier: FastRunner, batch: int, block: int,
                 width: int, rule: str, max_len: int, fuse: bool,
                 auto: DeviceAutomaton | None):
        dt, vt, dev = runner.text, verifier.text, runner.device
        f = runner.model.fields
        self.mask_id, self.eoa, self.shifted = f.mask_token_id, f.eoa_token_id, f.shift
        self.block, self.width, self.rule, self.fuse, self.auto = block, width, rule, fuse, auto
        self.cache = dt.new_cache(batch, max_len)        # the last ``block`` slots: scratch
        self.v_cache = vt.new_cache(batch, max_len)
        heads = dict(num_q_heads=dt.num_q_heads, num_kv_heads=dt.num_kv_heads,
                     head_dim=dt.head_dim, scale=dt.scale)
        self.attn, self.attn_prev = SdpaAttention(**heads), SdpaAttention(**heads)
        self.v_attn = CausalSdpaAttention(vt.num_q_heads, vt.num_kv_heads, vt.head_dim,
                                          vt.scale, width)
        long = dict(dtype=torch.long, device=dev)
        k = block
        self.arange_k, self.arange_w = torch.arange(k, **long), torch.arange(width, **long)
        self.scratch = max_len - k + self.arange_k                             # (K,)
        self.x2 = torch.full((batch, 2 * k), self.eoa, **long)                 # (Bb, 2K)
        self.cos2 = torch.zeros(batch, 2 * k, dt.head_dim, dtype=dt.dtype, device=dev)
        self.sin2 = torch.zeros_like(self.cos2)                                # (Bb, 2K, D)
        # distinct slots and non-empty key ranges from the start: the warm-up runs of the
        # steps must write finite keys (a masked NaN value still poisons attention)
        self.slots2 = torch.arange(2 * k, **long).repeat(batch, 1)             # (Bb, 2K)
        self.x, self.cos, self.sin, self.slots = (t[:, k:] for t in
                                                  (self.x2, self.cos2, self.sin2, self.slots2))
        self.kv_len = torch.full((batch,), 2 * k, **long)                      # (Bb,)
        self.kv_len_prev = torch.full((batch,), k, **long)
        self.v_x = torch.full((batch, width), self.eoa, **long)                # (Bb, W)
        self.v_cos = torch.zeros(batch, width, vt.head_dim, dtype=vt.dtype, device=dev)
        self.v_sin = torch.zeros_like(self.v_cos)                              # (Bb, W, Dv)
        self.v_slots = self.arange_w.repeat(batch, 1)                          # (Bb, W)
        self.v_kv_len = torch.full((batch,), width, **long)
        # per-row rotary tables of answer offsets 0..T-1: drafter cos, sin, verifier cos, sin
        self.tables = [torch.zeros(batch, max_len, t.head_dim, dtype=t.dtype, device=dev)
                       for t in (dt, dt, vt, vt)]                              # (Bb, T, D)
        self.base, self.v_base = torch.zeros(batch, **long), torch.zeros(batch, **long)
        self.pos, self.p0 = torch.zeros(batch, **long), torch.zeros(batch, **long)
        self.next_token = torch.full((batch,), self.eoa, **long)               # (Bb,)
        self.done = torch.ones(batch, dtype=torch.bool, device=dev)
        self.flags = torch.zeros(2, dtype=torch.bool, device=dev)   # new draft due, all done
        self.out = torch.full((batch, max_len), self.eoa, **long)              # (Bb, T)
        self.row_blocks = torch.zeros((), **long)
        self.max_new = torch.zeros((), **long)
        self.min_tail = torch.ones((), **long)
        self.lookahead = torch.ones((), dtype=torch.bool, device=dev)
        self.step = torch.zeros(1, **long)
        self.sched = torch.ones(k, **long)          # commit quota per draft step
        self.n_steps = torch.ones(1, **long)
        self.threshold = torch.full((), 0.9, dtype=torch.float32, device=dev)
        self.pending = torch.ones((), dtype=torch.bool, device=dev)
        self.entry = auto.state_set(batch, auto.done) if auto else None        # (Bb, S)
        prefix = Prefix(k, self.kv_len_prev, self.attn_prev)

        def draft(first: bool, last: bool):
            def run():
                if first:
                    out = dt.forward(self.x2, self.cos2, self.sin2, self.slots2, self.kv_len,
                                     self.cache, self.attn, prefix=prefix)      # (Bb, K, V)
                else:
                    out = dt.forward(self.x, self.cos, self.sin, self.slots, self.kv_len,
                                     self.cache, self.attn)                     # (Bb, K, V)
                if self.shifted:      # position i's prediction sits at i - 1; the first
                    out = torch.cat((out[:, :1], out[:, :-1]), 1)    # position is fixed
                self.select(out, last)
            return run

        def verify():
            self.read_window()
            logits = vt.forward(self.v_x, self.v_cos, self.v_sin, self.v_slots,
                                self.v_kv_len, self.v_cache, self.v_attn)       # (Bb, W, V)
            self.settle(logits)

        def commit():
            dt.forward(self.x2[:, :k], self.cos2[:, :k], self.sin2[:, :k],
                       self.slots2[:, :k], self.kv_len_prev, self.cache, self.attn_prev,
                       logits=False)

        make = STEP_MODES[runner.mode]
        kw = dict(pool=runner.pool, device=dev)
        self.begin = make(self.new_draft, **kw)
        firsts = (False, True) if fuse else (False,)
        self.drafts = {(first, last): make(draft(first, last), **kw)
                       for first in firsts for last in (False, True)}
        self.verify = make(verify, **kw)
        self.commit = None if fuse else make(commit, **kw)

    # ------------------------------------------------------------------ inside the steps
    def budget(self, offsets: torch.Tensor, length: int) -> torch.Tensor:
        return row_budget(self.auto, offsets, length, self.max_new)

    def new_draft(self) -> None:
        """The last draft to the left half (its rejected positions at scratch slots), the
        block [g, mask, ...] at each row's ``pos`` to the right half; sync-free."""
        k, pos = self.block, self.pos
        for t in (self.x2, self.cos2, self.sin2):
            t[:, :k].copy_(t[:, k:])
        kept = self.arange_k < (pos - self.p0).unsqueeze(-1)                   # (Bb, K)
        self.slots2[:, :k].copy_(torch.where(kept, self.slots, self.scratch))
        self.kv_len_prev.copy_((self.base + pos).clamp(min=1))  # padding rows: slot 0
        self.p0.copy_(pos)
        at = pos.unsqueeze(-1) + self.arange_k                                 # (Bb, K)
        self.cos.copy_(_rows(self.tables[0], at))
        self.sin.copy_(_rows(self.tables[1], at))
        self.slots.copy_(self.base.unsqueeze(-1) + at)
        self.kv_len.copy_(self.base + pos + k)
        first = torch.where(self.arange_k == 0, self.next_token.unsqueeze(-1), self.mask_id)
        self.x.copy_(torch.where(self.done.unsqueeze(-1), self.eoa, first))
        self.step.zero_()

    def select(self, logits: torch.Tensor, last: bool) -> None:
        """One draft step's choice of the block: the commit rule (or the constrained step,
        which needs ``last`` on the host); sync-free."""
        x = self.x
        quota = self.sched.gather(0, self.step.clamp(max=self.block - 1))      # (1,)
        if self.auto is not None:
            new, _ = cstep.fast_step(self.auto, self.entry, x,
                                     sets.column_logits(self.auto, logits), self.mask_id,
                                     self.budget(self.pos, self.block), self.rule, quota,
                                     last, self.threshold, 0.0, None)
        else:
            tokens, conf = choose_tokens(logits, self.mask_id, 0.0)
            commit = commit_mask(self.rule, conf, x == self.mask_id, quota, last,
                                 self.threshold)
            new = torch.where(commit, tokens, x)
        x.copy_(new)
        self.step.add_(1)
        self.pending.copy_(unsettled(x, self.mask_id, self.eoa).any())

    def read_window(self) -> None:
        """The verify's tokens (the draft from ``pos``: g, then the rest) and their rotary
        rows, slots and key lengths; sync-free."""
        self.v_x.copy_(verify_input(self.x, self.pos - self.p0, self.done, self.width,
                                    self.mask_id, self.eoa))
        at = self.pos.unsqueeze(-1) + self.arange_w                            # (Bb, W)
        self.v_cos.copy_(_rows(self.tables[2], at))
        self.v_sin.copy_(_rows(self.tables[3], at))
        self.v_slots.copy_(self.v_base.unsqueeze(-1) + at)
        self.v_kv_len.copy_(self.v_base + self.pos + self.width)

    def settle(self, logits: torch.Tensor) -> None:
        """The verifier's choices, what it accepts, the answer written, ``pos`` advanced and
        the flags set; sync-free."""
        x, pos = self.v_x, self.pos
        states = None
        if self.auto is not None:
            states = path_states(self.auto, self.entry, x, self.mask_id,
                                 self.budget(pos, self.width))                  # (Bb, W+1, S)
        choice = greedy_choice(logits, self.mask_id, self.auto,
                               None if states is None else states[:, 1:], pos + 1,
                               self.max_new)
        count, now_done, nxt = accept(x, choice, pos, self.done, self.eoa, self.max_new)
        guess = guesses(logits, choice, self.mask_id,
                        None if states is None else states[:, 1:])
        self.x.copy_(take_choices(self.x, pos - self.p0, guess, count, self.done,
                                  self.lookahead))
        kept = self.arange_w < count.unsqueeze(-1)                             # (Bb, W)
        at = pos.unsqueeze(-1) + self.arange_w
        self.out.scatter_(1, at, torch.where(kept, x, self.out.gather(1, at)))
        self.row_blocks.add_((~self.done).sum())
        if states is not None:
            self.entry.copy_(states.gather(1, count.view(-1, 1, 1).expand(
                -1, 1, states.shape[-1])).squeeze(1))
        pos.add_(count)
        self.done.copy_(now_done)
        self.next_token.copy_(nxt)
        self.flags.copy_(torch.stack((needs_draft(pos - self.p0, now_done, self.block,
                                                  self.min_tail), now_done.all())))


@torch.no_grad()
def fast_exact_decode(runner: FastRunner, verifier: FastRunner, batch: dict,
                      cfg: DecodeConfig = DecodeConfig(), exact: ExactConfig = ExactConfig(),
                      automaton: DeviceAutomaton | None = None) -> DecodeOutput:
    """``exact.exact_decode`` on the fast path: the drafter's runner ``runner`` and the
    verifier's ``verifier`` (the caller serialises calls that share a runner); same tokens,
    same drafts. ``stats`` is an ``ExactStats``."""
    model = runner.model
    cfg = resolve_decode(cfg, model.fields)
    check_exact(cfg)
    check_verifier(model, verifier.model)
    with runner.no_autograd():
        k = cfg.block_size or model.fields.block_size
        exact = exact.resolved(k, runner.device)
        n, w, eoa = cfg.max_new_tokens, exact.verify_width, model.fields.eoa_token_id
        schedule = transfer_schedule(k, exact.draft_steps)
        rows = batch["input_ids"].shape[0]
        stats = ExactStats(batch=rows)
        bb = runner.bucket(rows)
        key = ("exact", bb, k, w, cfg.commit_rule, runner.fuse_commit) + \
            ((automaton.language,) if automaton else ())
        needed = batch["input_ids"].shape[1] + n + 2 * k      # prompt, answer, block, scratch
        st: ExactState = runner.state(key, needed, lambda length: ExactState(
            runner, verifier, bb, k, w, cfg.commit_rule, length, runner.fuse_commit,
            automaton))

        t0 = time.perf_counter()
        prompt, v_prompt = prepare_prompt(model, batch, k), prepare_prompt(verifier.model,
                                                                           batch, 1)
        dyn, _, lengths = runner.prefill(prompt)
        v_dyn, v_last, v_lengths = verifier.prefill(v_prompt)
        st.cache.load_prefill(dyn, lengths)
        st.v_cache.load_prefill(v_dyn, v_lengths)
        st.base.copy_(runner.row_lengths(lengths, bb))
        st.v_base.copy_(verifier.row_lengths(v_lengths, bb))
        for table, part in zip(st.tables, runner.rope_rows(prompt, bb, n + k)
                               + verifier.rope_rows(v_prompt, bb, n + k)):
            table[:, :n + k].copy_(part)
        st.sched[:len(schedule)] = torch.tensor(schedule)
        st.n_steps.fill_(len(schedule))
        st.threshold.fill_(cfg.threshold)
        st.max_new.fill_(n)
        st.min_tail.fill_(exact.min_tail)
        st.lookahead.fill_(exact.lookahead)
        for t in (st.pos, st.p0, st.row_blocks):
            t.zero_()
        st.out.fill_(eoa)
        st.done.copy_(torch.arange(bb, device=runner.device) >= rows)      # padding: done
        states = None
        if automaton is not None:
            st.entry.copy_(automaton.state_set(bb, automaton.start)
                           * st.budget(st.pos, 0)[0])
            states = st.entry[:rows].unsqueeze(1)
        st.next_token.fill_(eoa)
        st.next_token[:rows] = greedy_choice(v_last, model.fields.mask_token_id, automaton,
                                             states, st.pos[:rows], n)[:, 0]
        sync(runner.device)
        stats.prefill_ms = (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        due, drafted = True, False         # a new draft is due: always in the first round
        for _ in range(n):                  # each round gains a token on every live row
            if due:
                st.begin()
                if drafted and not st.fuse:
                    check_cancel(stats.denoise_forwards + stats.verify_forwards
                                 + stats.forwards)
                    st.commit()
                    stats.forwards += 1
                steps = 0
                while steps < len(schedule):
                    for _ in range(min(runner.sync_every, len(schedule) - steps)):
                        first = st.fuse and drafted and steps == 0     # commits the last
                        check_cancel(stats.denoise_forwards + steps + stats.verify_forwards
                                     + stats.forwards)
                        st.drafts[(first, steps == len(schedule) - 1)]()
                        steps += 1
                    if not bool(st.pending):   # the draft's check, every sync_every steps
                        break
                stats.denoise_forwards += steps
                stats.drafts += 1
                drafted = True
            check_cancel(stats.denoise_forwards + stats.verify_forwards + stats.forwards)
            st.verify()
            stats.verify_forwards += 1
            stats.blocks += 1
            due, finished = st.flags.tolist()        # the round's one read of the device
            if finished:
                break
        stats.forwards += stats.denoise_forwards + stats.verify_forwards
        stats.row_blocks = int(st.row_blocks)
        sync(runner.device)
        stats.decode_ms = (time.perf_counter() - t0) * 1e3
        return finish_rows(st.out[:rows, :n], eoa, stats)
