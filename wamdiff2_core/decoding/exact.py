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

import torch

from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, resolve_decode
from wamdiff2_core.decoding.constraints import sets, step
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.output import DecodeOutput, finish_rows
from wamdiff2_core.decoding.remasking import commit_mask, transfer_schedule, unsettled
from wamdiff2_core.decoding.sampling import choose_tokens
from wamdiff2_core.decoding.verify import (ExactStats, accept, check_verifier,
                                           greedy_choice, guesses, needs_draft,
                                           path_states, row_budget, take_choices,
                                           verify_input)
from wamdiff2_core.model import masks
from wamdiff2_core.model.modeling import Wamdiff2Model, new_cache
from wamdiff2_core.model.prompt import Prompt, prepare_prompt


def check_exact(cfg: DecodeConfig) -> None:
    """ValueError (one sentence) for settings exact decoding cannot honour."""
    if cfg.temperature > 0:
        raise ValueError("exact mode returns the verifier's greedy answer; it does not "
                         f"sample (temperature {cfg.temperature:g} asked)")


class _Keys:
    """What one model has cached for a prompt batch: the keys of the prompt and of every
    answer position a forward kept, with each key's layout (type, block); rejected positions
    stay cached as holes (type PAD)."""

    def __init__(self, model: Wamdiff2Model, prompt: Prompt):
        self.model, self.prompt = model, prompt
        self.cache = new_cache(model)
        self.types, self.blocks = prompt.types, prompt.blocks
        out = model.forward_logits(prompt.input_ids, prompt.prefill_mask(), prompt.positions,
                                   self.cache, use_cache=True, **prompt.vision)
        self.last_logits = out[:, -1:]                                       # (B, 1, V)

    def positions(self, offset: torch.Tensor, length: int) -> torch.Tensor:
        """(3, B, length) M-RoPE positions of answer offsets ``offset`` (B,) onwards."""
        rel = torch.arange(length, device=offset.device)
        pos = (self.prompt.answer_start + offset).unsqueeze(-1) + rel
        return pos.unsqueeze(0).expand(3, -1, -1)

    def forward(self, x: torch.Tensor, types: torch.Tensor, blocks: torch.Tensor,
                offset: torch.Tensor, keep: bool) -> torch.Tensor:
        """Logits (B, K, V) of queries ``x`` (B, K) of layout ``types``/``blocks`` at answer
        ``offset`` (B,) against every key so far; ``keep`` caches them (PAD queries become
        holes), otherwise they are cropped off again."""
        length = self.types.shape[1]
        k_types = torch.cat([self.types, types], -1)
        k_blocks = torch.cat([self.blocks, blocks], -1)
        mask = masks.attention_mask(types, blocks, k_types, k_blocks, diagonal_offset=length)
        out = self.model.forward_logits(x, mask, self.positions(offset, x.shape[1]),
                                        self.cache, use_cache=True)
        if keep:
            self.types, self.blocks = k_types, k_blocks
        else:
            self.cache.crop(-x.shape[1])                     # negative: drop them
        return out

    def drop(self, keep: torch.Tensor) -> None:
        """Turn the last ``keep.shape[1]`` cached positions into holes where ``keep`` (B, K)
        is False."""
        k = keep.shape[1]
        self.types = torch.cat([self.types[:, :-k],
                                torch.where(keep, self.types[:, -k:], masks.PAD)], -1)


class _Draft:
    """The drafter's side: its cache and one block's denoising (plain code)."""

    def __init__(self, model: Wamdiff2Model, prompt: Prompt, cfg: DecodeConfig, block: int,
                 draft_steps: int, auto: DeviceAutomaton | None):
        self.model, self.cfg, self.block, self.auto = model, cfg, block, auto
        self.keys = _Keys(model, prompt)
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
            logits = self.keys.forward(x, types, blocks, pos, keep=False)
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
        self.keys.forward(x, torch.where(kept, types, masks.PAD), blocks, pos, keep=True)


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
    k = cfg.block_size or model.fields.block_size
    exact = exact.resolved(k, model.device)
    width, n = exact.verify_width, cfg.max_new_tokens
    eoa, mask_id = model.fields.eoa_token_id, model.fields.mask_token_id
    rows = batch["input_ids"].shape[0]
    stats = ExactStats(batch=rows)
    dev = model.device

    t0 = time.perf_counter()
    draft = _Draft(model, prepare_prompt(model, batch, k), cfg, k, exact.draft_steps,
                   automaton)
    ver = _Keys(verifier, prepare_prompt(verifier, batch, 1))
    pos = torch.zeros(rows, dtype=torch.long, device=dev)           # answer tokens so far
    done = torch.zeros(rows, dtype=torch.bool, device=dev)
    entry = None                                              # the language states at pos
    if automaton is not None:
        entry = automaton.state_set(rows, automaton.start) * row_budget(automaton, pos, 0,
                                                                        n)[0]
    g = greedy_choice(ver.last_logits, mask_id, automaton,
                      None if entry is None else entry.unsqueeze(1), pos, n)[:, 0]   # (B,)
    stats.prefill_ms = (time.perf_counter() - t0) * 1e3

    t0 = time.perf_counter()
    out = torch.full((rows, n + width), eoa, dtype=torch.long, device=dev)
    arange_k, arange_w = torch.arange(k, device=dev), torch.arange(width, device=dev)
    window, p0, drafts = None, pos, 0                 # the last draft, at answer offset p0
    while not bool(done.all()):
        if window is None or bool(needs_draft(pos - p0, done, k, exact.min_tail)):
            if window is not None:                   # its accepted part joins the cache
                check_cancel(stats.forwards + stats.denoise_forwards + stats.verify_forwards)
                draft.commit(window, pos - p0, drafts - 1, p0)
                stats.forwards += 1
            x = torch.where(arange_k == 0, g.unsqueeze(-1), mask_id)
            window, steps = draft.denoise(torch.where(done.unsqueeze(-1), eoa, x), drafts,
                                          pos, entry)
            p0, drafts = pos, drafts + 1
            stats.denoise_forwards += steps
            stats.drafts += 1
        x = verify_input(window, pos - p0, done, width, mask_id, eoa)          # (B, W)
        # to the verifier each token is a block: it reads them causally
        v_blocks = (ver.prompt.first_block.long() + pos).unsqueeze(-1) + arange_w
        check_cancel(stats.forwards + stats.denoise_forwards + stats.verify_forwards)
        logits = ver.forward(x, torch.full_like(x, masks.CLEAN), v_blocks, pos, keep=True)
        states = None
        if automaton is not None:
            states = path_states(automaton, entry, x, mask_id,
                                 row_budget(automaton, pos, width, n))     # (B, W+1, S)
        choice = greedy_choice(logits, mask_id, automaton,
                               None if states is None else states[:, 1:], pos + 1, n)
        count, now_done, g = accept(x, choice, pos, done, eoa, n)
        guess = guesses(logits, choice, mask_id, None if states is None else states[:, 1:])
        window = take_choices(window, pos - p0, guess, count, done, exact.lookahead)
        stats.verify_forwards += 1
        stats.blocks += 1
        stats.row_blocks += int((~done).sum())
        kept = arange_w < count.unsqueeze(-1)
        ver.drop(kept)
        at = pos.unsqueeze(-1) + arange_w
        out.scatter_(1, at, torch.where(kept, x, out.gather(1, at)))
        if states is not None:
            entry = states.gather(1, count.view(-1, 1, 1).expand(-1, 1,
                                                                 states.shape[-1]))[:, 0]
        pos, done = pos + count, now_done
    stats.forwards += stats.denoise_forwards + stats.verify_forwards
    stats.decode_ms = (time.perf_counter() - t0) * 1e3
    return finish_rows(out[:, :n], eoa, stats)
