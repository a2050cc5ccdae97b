"""The reference exact decoder: the diffusion model drafts a block, causal verifier forwards
check it, and the answer is the verifier's greedy answer token for token. Readable and eager,
with Hugging Face forwards and ``DynamicCache``: the ground truth of ``fast_exact.py``.

Each row is at answer offset p with the verifier's next token g (from its last forward, or
its prefill). A round:

1. draft, when a row has too few drafted tokens left (``verify.needs_draft``; always in the
   first round): the block [p, p + K) starts as g and K - 1 mask tokens; the drafter
   denoises it for at most ``draft_steps`` steps against its cache (its commit rule; the
   last step fills every position still masked). Before it, the accepted part of the last
   draft joins the drafter's cache in one commit pass (to the drafter, each draft is one
   clean block);
2. verify: one forward of the verifier over ``verify_width`` tokens, g and what follows p in
   the last draft (``verify.verify_input``), causal, against its cache, gives its greedy
   token after each prefix (``verify.greedy_choice``, restricted to the answer's language
   when one is enforced); the row keeps g and the longest run after it that equals those
   choices (``verify.accept``): at least one token per round, so a useless draft still
   yields the verifier's own answer, one token per round. The verifier's next token after
   the accepted run takes the place of the first draft token it did not accept, and the next
   round re-reads the draft from there: a wrong digit rarely spoils the tokens after it.

Rows accept different counts, so the rows' answers drift apart in the caches: each cache
keeps every position a forward wrote and marks the rejected ones as holes (``masks.PAD``)
that no later query sees. Positions (M-RoPE) follow the answer offset, not the slot.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import torch

from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import (DecodeConfig, ExactConfig, check_exact,
                                          resolve_decode)
from wamdiff2_core.decoding.constraints import sets, step
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.output import DecodeOutput, finish_rows
from wamdiff2_core.decoding.reference import Context
from wamdiff2_core.decoding.remasking import commit_mask, transfer_schedule, unsettled
from wamdiff2_core.decoding.sampling import choose_tokens
from wamdiff2_core.decoding.verify import (ExactStats, accept, check_verifier,
                                           greedy_choice, guesses, needs_draft,
                                           path_states, row_budget, take_choices,
                                           verify_input)
from wamdiff2_core.model import masks
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.model.prompt import Prompt, prepare_prompt


def _answer_positions(prompt: Prompt, offset: torch.Tensor, length: int) -> torch.Tensor:
    """(3, B, length) M-RoPE positions of answer offsets ``offset`` (B,) onwards (rows at
    different offsets, unlike ``Prompt.answer_positions``)."""
    rel = torch.arange(length, device=offset.device)
    pos = (prompt.answer_start + offset).unsqueeze(-1) + rel
    return pos.unsqueeze(0).expand(3, -1, -1)


class _Draft:
    """The drafter's side: its cache and one block's denoising (plain code)."""

    def __init__(self, model: Wamdiff2Model, prompt: Prompt, cfg: DecodeConfig, block: int,
                 draft_steps: int, auto: DeviceAutomaton | None):
        self.model, self.cfg, self.block, self.auto = model, cfg, block, auto
        self.keys = Context(model, prompt)
        self.schedule = transfer_schedule(block, draft_steps)
        self.mask_id, self.eoa = model.fields.mask_token_id, model.fields.eoa_token_id

    def layout(self, index: int, token_type: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(types, blocks) of draft number ``index``: to the drafter each draft is a block."""
        first = self.keys.prompt.first_block.long().unsqueeze(-1)            # (B, 1)
        blocks = (first + index).expand(-1, self.block)
        return torch.full_like(blocks, token_type), blocks

    def denoise(self, x: torch.Tensor, index: int, pos: torch.Tensor,
                entry: torch.Tensor | None) -> tuple[torch.Tensor, int]:
        """Draft number ``index`` from ``x`` (B, K) at answer offset ``pos`` (B,) (first token
        fixed, the rest masked) and the steps it took; ``entry`` (B, S): the language states
        at ``pos`` (constrained)."""
        types, blocks = self.layout(index, masks.NOISY)
        cfg, steps = self.cfg, 0
        for s, quota in enumerate(self.schedule):
            if s > 0 and not unsettled(x, self.mask_id, self.eoa).any():
                break             # (the first step always runs: the fast one commits in it)
            last = s == len(self.schedule) - 1
            check_cancel(steps)
            logits = self.keys.logits(x, types, blocks, self._positions(pos), keep=False)
            if self.model.fields.shift:      # position i's prediction sits at i - 1 (the
                logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)   # first is fixed)
            if self.auto is not None:
                x = torch.cat([step.reference_step(
                    self.auto, entry[r:r + 1], x[r:r + 1],
                    sets.column_logits(self.auto, logits[r:r + 1]), self.mask_id,
                    sets.budget_ok(self.auto, int(pos[r]), self.block, cfg.max_new_tokens),
                    cfg.commit_rule, quota, last, cfg.threshold, 0.0, None)
                    for r in range(x.shape[0])])
            else:
                tokens, conf = choose_tokens(logits, self.mask_id, 0.0)
                commit = commit_mask(cfg.commit_rule, conf, x == self.mask_id, quota, last,
                                     cfg.threshold)
                x = torch.where(commit, tokens, x)
            steps += 1
        return x, steps

    def commit(self, x: torch.Tensor, count: torch.Tensor, index: int,
               pos: torch.Tensor) -> None:
        """Cache the first ``count`` (B,) tokens of each row's draft number ``index``, ``x``
        (B, K) at answer offset ``pos`` (B,), as clean keys."""
        types, blocks = self.layout(index, masks.CLEAN)
        kept = torch.arange(self.block, device=x.device) < count.unsqueeze(-1)
        self.keys.logits(x, torch.where(kept, types, masks.PAD), blocks, self._positions(pos),
                         keep=True)

    def _positions(self, offset: torch.Tensor) -> torch.Tensor:
        return _answer_positions(self.keys.prompt, offset, self.block)


class _Verdict(NamedTuple):
    """What one verify gives: the tokens it read (B, W), which of them it kept (B, W), the
    accepted counts (B,), the rows done (B,), its next token (B,), the draft with its choices
    written (B, K) and the language states at the new offsets (B, S) or None."""
    tokens: torch.Tensor
    kept: torch.Tensor
    count: torch.Tensor
    done: torch.Tensor
    next_token: torch.Tensor
    window: torch.Tensor
    entry: torch.Tensor | None


class _Verifier:
    """The verifier's side: its cache and one verify (plain code)."""

    def __init__(self, model: Wamdiff2Model, prompt: Prompt, width: int, max_new: int,
                 auto: DeviceAutomaton | None):
        self.context = Context(model, prompt)
        self.width, self.max_new, self.auto = width, max_new, auto
        self.mask_id, self.eoa = model.fields.mask_token_id, model.fields.eoa_token_id
        self.positions = torch.arange(width, device=model.device)                # (W,)

    def first_token(self, pos: torch.Tensor, entry: torch.Tensor | None) -> torch.Tensor:
        """(B,) the verifier's first answer token, from its prefill."""
        return greedy_choice(self.context.last_logits, self.mask_id, self.auto,
                             None if entry is None else entry.unsqueeze(1), pos,
                             self.max_new)[:, 0]

    def verify(self, window: torch.Tensor, start: torch.Tensor, pos: torch.Tensor,
               done: torch.Tensor, entry: torch.Tensor | None, lookahead: bool) -> _Verdict:
        """One causal forward over the draft ``window`` (B, K) from each row's position
        ``start`` (B,) in it, at answer offset ``pos`` (B,); the rejected positions become
        holes in the cache."""
        x = verify_input(window, start, done, self.width, self.mask_id, self.eoa)  # (B, W)
        prompt = self.context.prompt
        # to the verifier each token is a block: it reads them causally
        blocks = (prompt.first_block.long() + pos).unsqueeze(-1) + self.positions
        logits = self.context.logits(x, torch.full_like(x, masks.CLEAN), blocks,
                                     _answer_positions(prompt, pos, self.width), keep=True)
        after = None
        if self.auto is not None:
            states = path_states(self.auto, entry, x, self.mask_id,
                                 row_budget(self.auto, pos, self.width, self.max_new))
            after = states[:, 1:]                                            # (B, W, S)
        choice = greedy_choice(logits, self.mask_id, self.auto, after, pos + 1, self.max_new)
        count, now_done, next_token = accept(x, choice, pos, done, self.eoa, self.max_new)
        guess = guesses(logits, choice, self.mask_id, after)
        window = take_choices(window, start, guess, count, done, lookahead)
        kept = self.positions < count.unsqueeze(-1)
        self.context.drop(kept)
        if after is not None:
            entry = states.gather(1, count.view(-1, 1, 1).expand(-1, 1,
                                                                 states.shape[-1]))[:, 0]
        return _Verdict(x, kept, count, now_done, next_token, window, entry)


@torch.no_grad()
def exact_decode(model: Wamdiff2Model, verifier: Wamdiff2Model, batch: dict,
                 cfg: DecodeConfig = DecodeConfig(), exact: ExactConfig = ExactConfig(),
                 automaton: DeviceAutomaton | None = None) -> DecodeOutput:
    """The verifier's greedy answers of an encoded prompt batch, drafted by the diffusion
    ``model`` in blocks of ``cfg.block_size`` (default: the model's) with its commit rule,
    as ``exact`` sets. With ``automaton`` (the answer language's,
    ``constraints.session.automaton_for``) the verifier's choices and the drafts keep to
    that language. ``stats`` is an ``ExactStats``.

    Raises:
        ValueError: a verifier that does not share the model's tokenizer, or sampling.
    """
    cfg = resolve_decode(cfg, model.fields)
    check_exact(cfg)
    check_verifier(model, verifier)
    block = cfg.block_size or model.fields.block_size
    exact = exact.resolved(block, model.device)
    width, n = exact.verify_width, cfg.max_new_tokens
    eoa, mask_id = model.fields.eoa_token_id, model.fields.mask_token_id
    rows, device = batch["input_ids"].shape[0], model.device
    stats = ExactStats(batch=rows)

    t0 = time.perf_counter()
    draft = _Draft(model, prepare_prompt(model, batch, block), cfg, block, exact.draft_steps,
                   automaton)
    ver = _Verifier(verifier, prepare_prompt(verifier, batch, 1), width, n, automaton)
    pos = torch.zeros(rows, dtype=torch.long, device=device)        # answer tokens so far
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    entry = None                                              # the language states at pos
    if automaton is not None:
        entry = automaton.state_set(rows, automaton.start) * row_budget(automaton, pos, 0,
                                                                        n)[0]
    next_token = ver.first_token(pos, entry)                                   # (B,)
    stats.prefill_ms = (time.perf_counter() - t0) * 1e3

    t0 = time.perf_counter()
    out = torch.full((rows, n + width), eoa, dtype=torch.long, device=device)
    first = torch.arange(block, device=device) == 0
    window, draft_start, drafts = None, pos, 0     # the last draft, at answer offset draft_start
    while not bool(done.all()):
        if window is None or bool(needs_draft(pos - draft_start, done, block, exact.min_tail)):
            if window is not None:                   # its accepted part joins the cache
                check_cancel(stats.forwards + stats.denoise_forwards + stats.verify_forwards)
                draft.commit(window, pos - draft_start, drafts - 1, draft_start)
                stats.forwards += 1
            x = torch.where(first, next_token.unsqueeze(-1), mask_id)
            window, steps = draft.denoise(torch.where(done.unsqueeze(-1), eoa, x), drafts,
                                          pos, entry)
            draft_start, drafts = pos, drafts + 1
            stats.denoise_forwards += steps
            stats.drafts += 1
        check_cancel(stats.forwards + stats.denoise_forwards + stats.verify_forwards)
        verdict = ver.verify(window, pos - draft_start, pos, done, entry, exact.lookahead)
        stats.verify_forwards += 1
        stats.blocks += 1
        stats.row_blocks += int((~done).sum())
        at = pos.unsqueeze(-1) + ver.positions
        out.scatter_(1, at, torch.where(verdict.kept, verdict.tokens, out.gather(1, at)))
        window, entry, next_token = verdict.window, verdict.entry, verdict.next_token
        pos, done = pos + verdict.count, verdict.done
    stats.forwards += stats.denoise_forwards + stats.verify_forwards
    stats.decode_ms = (time.perf_counter() - t0) * 1e3
    return finish_rows(out[:, :n], eoa, stats)
