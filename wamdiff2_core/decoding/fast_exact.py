"""The fast exact decoder: ``exact.exact_decode``'s rounds (the diffusion model drafts a block,
causal verifier forwards accept the longest prefix equal to the verifier's greedy choices plus
its next token) with static KV caches, fixed-shape steps that never make the host wait, and
CUDA graphs on a GPU (eager or ``torch.compile`` on a CPU). Token for token the reference's
answers, with the same drafts, which are the verifier's greedy answers (tests check both).

Each row keeps its answer offset ``pos`` and its last draft's offset ``draft_start`` on the
device (``ExactRows``), so
rows that accept different counts never make the host read them: every input of a step (rotary
rows, cache slots, key lengths, the tokens a verify reads) is gathered at them inside the step.

Each model's runner owns that model's part: the drafter's runner a ``DraftState`` (its static
cache, its two-block inputs, the round's ``ExactRows`` and the begin, draft and commit
steps), the verifier's runner a ``VerifyState`` (its static cache, the verify inputs and the
verify step, which reads the draft and writes the rows of the ``DraftState`` it is built
for). A round:

    begin (replayed, when a new draft is due): the last draft moves to the left half of the
        drafter's two-block inputs, its rejected positions pointed at scratch slots past the
        end of the cache (which no key length reaches); the new block [next token, mask, ...] and
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
from dataclasses import dataclass

import torch

from wamdiff2_core.decoding.attention import SdpaAttention
from wamdiff2_core.decoding.blocks import BlockInputs, BlockSchedule, run_block_steps
from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import (DecodeConfig, ExactConfig, check_exact,
                                          resolve_decode)
from wamdiff2_core.decoding.constraints import sets, step as cstep
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
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
        width = self.qo_len
        seen = kv_len.unsqueeze(-1) - (width - 1 - torch.arange(width, device=kv_len.device))
        mask = torch.arange(max_len, device=kv_len.device) < seen.unsqueeze(-1)  # (B, W, L)
        return mask.repeat(1, self.hq // self.hkv, 1).unsqueeze(1)


def _gather_rows(table: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows ``offsets`` (B, N) of per-row tables (B, T, D) -> (B, N, D), on the device."""
    return table.gather(1, offsets.unsqueeze(-1).expand(-1, -1, table.shape[-1]))


@dataclass
class ExactRows:
    """Where each row of an exact decode stands (Bb rows, answers of up to T tokens), on the
    device: the verify step writes it, the draft steps read it."""
    pos: torch.Tensor          # (Bb,) answer tokens accepted so far
    draft_start: torch.Tensor  # (Bb,) answer offset of the last draft's first position
    next_token: torch.Tensor   # (Bb,) the verifier's next token (the next draft's first)
    done: torch.Tensor         # (Bb,) bool: the row's answer is complete
    out: torch.Tensor          # (Bb, T) the answers
    flags: torch.Tensor        # (2,) bool: a new draft is due, every row is done
    row_blocks: torch.Tensor   # () rounds summed over the rows still decoding in them
    max_new: torch.Tensor      # () the answer budget
    min_tail: torch.Tensor     # () ``ExactConfig.min_tail``
    lookahead: torch.Tensor    # () bool, ``ExactConfig.lookahead``
    entry: torch.Tensor | None  # (Bb, S) the answer language's states at ``pos``
    auto: DeviceAutomaton | None

    @classmethod
    def allocate(cls, batch: int, max_len: int, eoa: int, auto: DeviceAutomaton | None,
                 device: torch.device) -> "ExactRows":
        long = dict(dtype=torch.long, device=device)
        return cls(pos=torch.zeros(batch, **long), draft_start=torch.zeros(batch, **long),
                   next_token=torch.full((batch,), eoa, **long),
                   done=torch.ones(batch, dtype=torch.bool, device=device),
                   out=torch.full((batch, max_len), eoa, **long),
                   flags=torch.zeros(2, dtype=torch.bool, device=device),
                   row_blocks=torch.zeros((), **long), max_new=torch.zeros((), **long),
                   min_tail=torch.ones((), **long),
                   lookahead=torch.ones((), dtype=torch.bool, device=device),
                   entry=auto.state_set(batch, auto.done) if auto else None, auto=auto)

    def budget(self, offsets: torch.Tensor, length: int) -> torch.Tensor:
        """``verify.row_budget`` of the answer language at ``offsets``; sync-free."""
        return row_budget(self.auto, offsets, length, self.max_new)

    def start(self, rows: int, max_new: int, exact: ExactConfig, first_logits: torch.Tensor,
              mask_id: int, eoa: int) -> None:
        """Set for a decode of ``rows`` real rows (the rest padding, done from the start)
        whose verifier prefill ended with ``first_logits`` (R, 1, V)."""
        self.max_new.fill_(max_new)
        self.min_tail.fill_(exact.min_tail)
        self.lookahead.fill_(exact.lookahead)
        for t in (self.pos, self.draft_start, self.row_blocks):
            t.zero_()
        self.out.fill_(eoa)
        self.done.copy_(torch.arange(len(self.done), device=self.done.device) >= rows)
        states = None
        if self.auto is not None:
            self.entry.copy_(self.auto.state_set(len(self.done), self.auto.start)
                             * self.budget(self.pos, 0)[0])
            states = self.entry[:rows].unsqueeze(1)
        self.next_token.fill_(eoa)
        self.next_token[:rows] = greedy_choice(first_logits, mask_id, self.auto, states,
                                               self.pos[:rows], max_new)[:, 0]


class DraftState:
    """The drafter's part of one (batch bucket, block size, verify width, commit rule, fused
    commit?, language) shape, owned by the drafter's runner: its static cache (the last
    ``block`` slots: scratch), its two-block inputs (the right half the last draft, the left
    half the draft before it, whose accepted part the fused first step commits), its rotary
    tables, the round's rows and the compiled or captured begin, draft and commit steps."""

    def __init__(self, runner: FastRunner, batch: int, block: int, rule: str, max_len: int,
                 fuse: bool, auto: DeviceAutomaton | None):
        self.text, device, fields = runner.text, runner.device, runner.model.fields
        self.mask_id, self.eoa, self.shifted = (fields.mask_token_id, fields.eoa_token_id,
                                                fields.shift)
        self.block, self.rule, self.fuse, self.auto = block, rule, fuse, auto
        self.cache = self.text.new_cache(batch, max_len)
        heads = dict(num_q_heads=self.text.num_q_heads, num_kv_heads=self.text.num_kv_heads,
                     head_dim=self.text.head_dim, scale=self.text.scale)
        self.attn, self.attn_prev = SdpaAttention(**heads), SdpaAttention(**heads)
        self.inputs = BlockInputs.allocate(self.text, batch, block, self.eoa)
        self.schedule = BlockSchedule.allocate(block, device)
        self.rows = ExactRows.allocate(batch, max_len, self.eoa, auto, device)
        self.prefix = Prefix(block, self.inputs.kv_len_prev, self.attn_prev)
        self.positions = torch.arange(block, dtype=torch.long, device=device)     # (K,)
        self.scratch = max_len - block + self.positions                           # (K,)
        self.base = torch.zeros(batch, dtype=torch.long, device=device)  # prompt lengths
        # rotary rows of answer offsets 0..T-1, per row
        self.cos_table = torch.zeros(batch, max_len, self.text.head_dim,
                                     dtype=self.text.dtype, device=device)    # (Bb, T, D)
        self.sin_table = torch.zeros_like(self.cos_table)
        make = STEP_MODES[runner.mode]
        steps = dict(pool=runner.pool, device=device)
        self.begin = make(self.new_draft, **steps)
        firsts = (False, True) if fuse else (False,)
        self.drafts = {(first, last): make(lambda first=first, last=last:
                                           self.draft_step(first, last), **steps)
                       for first in firsts for last in (False, True)}
        self.commit = None if fuse else make(self.commit_pass, **steps)

    def new_draft(self) -> None:
        """The last draft to the left half (its rejected positions at scratch slots), the
        block [next token, mask, ...] at each row's ``pos`` to the right half; sync-free."""
        inputs, rows = self.inputs, self.rows
        kept = self.positions < (rows.pos - rows.draft_start).unsqueeze(-1)    # (Bb, K)
        inputs.shift(torch.where(kept, inputs.slots, self.scratch))
        inputs.kv_len_prev.copy_((self.base + rows.pos).clamp(min=1))  # padding rows: slot 0
        rows.draft_start.copy_(rows.pos)
        at = rows.pos.unsqueeze(-1) + self.positions                          # (Bb, K)
        inputs.cos.copy_(_gather_rows(self.cos_table, at))
        inputs.sin.copy_(_gather_rows(self.sin_table, at))
        inputs.slots.copy_(self.base.unsqueeze(-1) + at)
        inputs.kv_len.copy_(self.base + rows.pos + self.block)
        first = torch.where(self.positions == 0, rows.next_token.unsqueeze(-1), self.mask_id)
        inputs.x.copy_(torch.where(rows.done.unsqueeze(-1), self.eoa, first))
        self.schedule.step.zero_()

    def draft_step(self, first: bool, last: bool) -> None:
        """One denoising step of the draft; ``first`` also commits the accepted part of the
        draft before (fused), ``last`` is the draft budget's last step."""
        out = self.inputs.forward(self.text, self.cache, self.attn,
                                  self.prefix if first else None)               # (Bb, K, V)
        if self.shifted:          # position i's prediction sits at i - 1; the first
            out = torch.cat((out[:, :1], out[:, :-1]), 1)      # position is fixed
        self.select(out, last)

    def select(self, logits: torch.Tensor, last: bool) -> None:
        """One draft step's choice of the block: the commit rule (or the constrained step,
        which needs ``last`` on the host); sync-free."""
        x, schedule, rows = self.inputs.x, self.schedule, self.rows
        quota = schedule.quota()                                               # (1,)
        if self.auto is not None:
            new, _ = cstep.fast_step(self.auto, rows.entry, x,
                                     sets.column_logits(self.auto, logits), self.mask_id,
                                     rows.budget(rows.pos, self.block), self.rule, quota,
                                     last, schedule.threshold, 0.0, None)
        else:
            tokens, conf = choose_tokens(logits, self.mask_id, 0.0)
            commit = commit_mask(self.rule, conf, x == self.mask_id, quota, last,
                                 schedule.threshold)
            new = torch.where(commit, tokens, x)
        x.copy_(new)
        schedule.step.add_(1)
        schedule.pending.copy_(unsettled(x, self.mask_id, self.eoa).any())

    def commit_pass(self) -> None:
        """The accepted part of the draft before (the left half) into the cache (unfused)."""
        inputs, k = self.inputs, self.block
        self.text.forward(inputs.x2[:, :k], inputs.cos2[:, :k], inputs.sin2[:, :k],
                          inputs.slots2[:, :k], inputs.kv_len_prev, self.cache,
                          self.attn_prev, logits=False)


class VerifyState:
    """The verifier's part of one shape, owned by the verifier's runner: its static cache,
    the ``width`` tokens a verify reads with their rotary rows, slots and key lengths, its
    rotary tables and the compiled or captured verify step. The step reads the draft and
    writes the rows of ``draft`` (the ``DraftState`` it is built for; a new one needs a new
    verify state)."""

    def __init__(self, runner: FastRunner, draft: DraftState, width: int, max_len: int):
        self.text, device = runner.text, runner.device
        self.draft, self.rows, self.width = draft, draft.rows, width
        batch = draft.rows.pos.shape[0]
        self.cache = self.text.new_cache(batch, max_len)
        self.attn = CausalSdpaAttention(self.text.num_q_heads, self.text.num_kv_heads,
                                        self.text.head_dim, self.text.scale, width)
        long = dict(dtype=torch.long, device=device)
        self.positions = torch.arange(width, **long)                              # (W,)
        self.tokens = torch.full((batch, width), draft.eoa, **long)               # (Bb, W)
        self.cos = torch.zeros(batch, width, self.text.head_dim, dtype=self.text.dtype,
                               device=device)                                   # (Bb, W, D)
        self.sin = torch.zeros_like(self.cos)
        self.slots = self.positions.repeat(batch, 1)                              # (Bb, W)
        self.kv_len = torch.full((batch,), width, **long)                         # (Bb,)
        self.base = torch.zeros(batch, **long)                           # prompt lengths
        self.cos_table = torch.zeros(batch, max_len, self.text.head_dim,
                                     dtype=self.text.dtype, device=device)    # (Bb, T, D)
        self.sin_table = torch.zeros_like(self.cos_table)
        self.verify = STEP_MODES[runner.mode](self.verify_step, pool=runner.pool,
                                               device=device)

    def verify_step(self) -> None:
        """The tokens to read, a causal forward of them against the cache, the verifier's
        choices and what it accepts (``settle``); sync-free."""
        self.read_window()
        logits = self.text.forward(self.tokens, self.cos, self.sin, self.slots, self.kv_len,
                                   self.cache, self.attn)                       # (Bb, W, V)
        self.settle(logits)

    def read_window(self) -> None:
        """The verify's tokens (the draft from ``pos``: the next token, then the rest) and
        their rotary rows, slots and key lengths; sync-free."""
        draft, rows = self.draft, self.rows
        self.tokens.copy_(verify_input(draft.inputs.x, rows.pos - rows.draft_start, rows.done,
                                       self.width, draft.mask_id, draft.eoa))
        at = rows.pos.unsqueeze(-1) + self.positions                          # (Bb, W)
        self.cos.copy_(_gather_rows(self.cos_table, at))
        self.sin.copy_(_gather_rows(self.sin_table, at))
        self.slots.copy_(self.base.unsqueeze(-1) + at)
        self.kv_len.copy_(self.base + rows.pos + self.width)

    def settle(self, logits: torch.Tensor) -> None:
        """The verifier's choices, what it accepts, the answer written, ``pos`` advanced and
        the flags set; sync-free."""
        draft, rows, x, pos = self.draft, self.rows, self.tokens, self.rows.pos
        mask_id, window = draft.mask_id, draft.inputs.x
        states = None
        if rows.auto is not None:
            states = path_states(rows.auto, rows.entry, x, mask_id,
                                 rows.budget(pos, self.width))                  # (Bb, W+1, S)
        after = None if states is None else states[:, 1:]
        choice = greedy_choice(logits, mask_id, rows.auto, after, pos + 1, rows.max_new)
        count, now_done, next_token = accept(x, choice, pos, rows.done, draft.eoa,
                                             rows.max_new)
        guess = guesses(logits, choice, mask_id, after)
        window.copy_(take_choices(window, pos - rows.draft_start, guess, count, rows.done,
                                  rows.lookahead))
        kept = self.positions < count.unsqueeze(-1)                            # (Bb, W)
        at = pos.unsqueeze(-1) + self.positions
        rows.out.scatter_(1, at, torch.where(kept, x, rows.out.gather(1, at)))
        rows.row_blocks.add_((~rows.done).sum())
        if states is not None:
            rows.entry.copy_(states.gather(1, count.view(-1, 1, 1).expand(
                -1, 1, states.shape[-1])).squeeze(1))
        pos.add_(count)
        rows.done.copy_(now_done)
        rows.next_token.copy_(next_token)
        rows.flags.copy_(torch.stack((needs_draft(pos - rows.draft_start, now_done,
                                                  draft.block, rows.min_tail),
                                      now_done.all())))


def _states(runner: FastRunner, verifier: FastRunner, batch: dict, cfg: DecodeConfig,
            block: int, width: int, auto: DeviceAutomaton | None
            ) -> tuple[DraftState, VerifyState]:
    """Each runner's state for this decode's shape, built (or grown) on first use; the
    verify state is rebuilt with its draft state."""
    bucket = runner.bucket(batch["input_ids"].shape[0])
    key = ("exact", bucket, block, width, cfg.commit_rule, runner.fuse_commit) + \
        ((auto.language,) if auto else ())
    needed = batch["input_ids"].shape[1] + cfg.max_new_tokens + 2 * block  # + block, scratch
    draft = runner.state(key, needed, lambda length: DraftState(
        runner, bucket, block, cfg.commit_rule, length, runner.fuse_commit, auto))
    verify = verifier.state(("verify",) + key, needed,
                            lambda length: VerifyState(verifier, draft, width, length),
                            fits=lambda state: state.draft is draft)
    return draft, verify


def _prefill(runner: FastRunner, verifier: FastRunner, draft: DraftState,
             verify: VerifyState, batch: dict, answer_len: int) -> torch.Tensor:
    """The prompt into each model's cache and each one's rotary tables of answer offsets
    0..``answer_len``-1; returns the verifier's logits after the prompt (R, 1, V)."""
    bucket = draft.rows.pos.shape[0]
    for owner, state, block in ((runner, draft, draft.block), (verifier, verify, 1)):
        prompt = prepare_prompt(owner.model, batch, block)
        keys_values, last_logits, lengths = owner.prefill(prompt)
        state.cache.load_prefill(keys_values, lengths)
        state.base.copy_(owner.row_lengths(lengths, bucket))
        cos, sin = owner.rope_rows(prompt, bucket, answer_len)                 # (Bb, N, D)
        state.cos_table[:, :answer_len].copy_(cos)
        state.sin_table[:, :answer_len].copy_(sin)
    return last_logits


def _forwards(stats: ExactStats) -> int:
    return stats.denoise_forwards + stats.verify_forwards + stats.forwards


def _draft_block(runner: FastRunner, draft: DraftState, stats: ExactStats, budget: int,
                 drafted: bool) -> None:
    """A new draft: the block begun, the draft before committed (unfused; fused, its first
    step commits it), at most ``budget`` denoising steps."""
    draft.begin()
    if drafted and not draft.fuse:
        check_cancel(_forwards(stats))
        draft.commit()
        stats.forwards += 1
    fused = draft.fuse and drafted                       # the first step commits the last
    stats.denoise_forwards += run_block_steps(
        lambda step: draft.drafts[(fused and step == 0, step == budget - 1)](),
        budget, runner.sync_every, draft.schedule.pending, _forwards(stats))
    stats.drafts += 1


def _rounds(runner: FastRunner, draft: DraftState, verify: VerifyState, stats: ExactStats,
            max_new: int, budget: int) -> None:
    """Rounds until every row is done: a draft when one is due, then a verify; the host
    reads the device once per round (the flags)."""
    due, drafted = True, False         # a new draft is due: always in the first round
    for _ in range(max_new):            # each round gains a token on every live row
        if due:
            _draft_block(runner, draft, stats, budget, drafted)
            drafted = True
        check_cancel(_forwards(stats))
        verify.verify()
        stats.verify_forwards += 1
        stats.blocks += 1
        due, finished = draft.rows.flags.tolist()   # the round's one read of the device
        if finished:
            break


@torch.no_grad()
def fast_exact_decode(runner: FastRunner, verifier: FastRunner, batch: dict,
                      cfg: DecodeConfig = DecodeConfig(), exact: ExactConfig = ExactConfig(),
                      automaton: DeviceAutomaton | None = None) -> DecodeOutput:
    """``exact.exact_decode`` on the fast path: the drafter's runner ``runner`` and the
    verifier's ``verifier``, each holding its own model's state (the caller serialises calls
    that share a runner); same tokens, same drafts. ``stats`` is an ``ExactStats``."""
    model = runner.model
    cfg = resolve_decode(cfg, model.fields)
    check_exact(cfg)
    check_verifier(model, verifier.model)
    with runner.no_autograd():
        block = cfg.block_size or model.fields.block_size
        exact = exact.resolved(block, runner.device)
        quotas = transfer_schedule(block, exact.draft_steps)
        rows, n = batch["input_ids"].shape[0], cfg.max_new_tokens
        stats = ExactStats(batch=rows)
        draft, verify = _states(runner, verifier, batch, cfg, block, exact.verify_width,
                                automaton)

        t0 = time.perf_counter()
        first_logits = _prefill(runner, verifier, draft, verify, batch, n + block)
        draft.schedule.load(quotas, cfg.threshold)
        draft.rows.start(rows, n, exact, first_logits, draft.mask_id, draft.eoa)
        sync(runner.device)
        stats.prefill_ms = (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        _rounds(runner, draft, verify, stats, n, len(quotas))
        stats.forwards += stats.denoise_forwards + stats.verify_forwards
        stats.row_blocks = int(draft.rows.row_blocks)
        sync(runner.device)
        stats.decode_ms = (time.perf_counter() - t0) * 1e3
        return finish_rows(draft.rows.out[:rows, :n], draft.eoa, stats)
