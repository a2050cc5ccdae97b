"""The reference decoders: readable, eager, the ground truth for every faster variant.

Block diffusion with an exact prefix KV cache: the prompt is prefilled once; each denoising
step runs only the current block against the cache (its keys/values are cropped off again);
one commit pass appends the finished block. ``use_cache=False`` recomputes the whole sequence
at every step instead, which must give the same tokens (tests check it).

The AR baseline decodes a block-size-1 next-token model token by token with a KV cache.

A shifted model (``fields.shift``) reads position i's prediction at position i - 1: inside
the block from the step's own logits, for the block's first position from the logits of the
last position before the block (the prompt's last, then each commit pass's last), carried
from block to block.

Fixes over the reference repository's decoder: the padding mask applies at every step (so a
padded row decodes exactly like the same prompt alone), the mask token is never committed,
tokens after the end of the answer are dropped (and a block stops denoising once no row has a
masked position before its end-of-answer token: ``remasking.unsettled``; the steps the
reference repository would still run there only fill positions that are dropped), and no
cache-update forward runs after the final block.
"""
from __future__ import annotations

import time

import torch

from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import DecodeConfig, resolve_decode
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.constraints.session import (ReferenceConstraint, automaton_for,
                                                        language_for)
from wamdiff2_core.decoding.output import DecodeOutput, DecodeStats, finish_rows
from wamdiff2_core.decoding.remasking import commit_mask, transfer_schedule, unsettled
from wamdiff2_core.decoding.sampling import choose_tokens
from wamdiff2_core.model import masks
from wamdiff2_core.model.modeling import Wamdiff2Model, new_cache
from wamdiff2_core.model.prompt import Prompt, prepare_prompt
from wamdiff2_core.tasks.languages import AnswerLanguage


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def _constraint(model: Wamdiff2Model, cfg: DecodeConfig, language: AnswerLanguage | None,
                automaton: DeviceAutomaton | None, rows: int) -> ReferenceConstraint | None:
    """The bookkeeping of a constrained decode (None when unconstrained): ``automaton`` when
    the caller has it compiled, else ``language`` compiled now."""
    language = language_for(cfg, automaton.language if automaton else language)
    if language is None:
        return None
    auto = automaton or automaton_for(model, language, cfg.max_new_tokens)
    return ReferenceConstraint.for_model(model, auto, cfg, rows)


class Context:
    """What one model has seen of a prompt batch (prompt + the answer positions a forward
    kept, each with its layout: type, block) and how a forward is computed against it: with
    the exact KV cache, or by recomputing the full sequence. The reference decoders and the
    reference exact decoder (both of its models) read through it."""

    def __init__(self, model: Wamdiff2Model, prompt: Prompt, use_cache: bool = True):
        self.model, self.prompt, self.use_cache = model, prompt, use_cache
        self.types, self.blocks = prompt.types, prompt.blocks
        self.ids, self.positions = prompt.input_ids, prompt.positions
        self.cache = new_cache(model) if use_cache else None
        # Logits at the last prompt position (the AR baseline's first token).
        out = model.forward_logits(prompt.input_ids, prompt.prefill_mask(), prompt.positions,
                                   self.cache, use_cache=use_cache, **prompt.vision)
        self.last_logits = out[:, -1:]                                      # (B, 1, V)

    def logits(self, x, types, blocks, positions, keep: bool) -> torch.Tensor:
        """Logits of queries ``x`` (B, K) of the given layout against everything so far;
        ``keep`` appends them to the context (a commit pass; PAD queries become holes that
        no later query sees, ``drop``), otherwise they are cropped off again."""
        k_types = torch.cat([self.types, types], -1)
        k_blocks = torch.cat([self.blocks, blocks], -1)
        if self.use_cache:
            mask = masks.attention_mask(types, blocks, k_types, k_blocks,
                                        diagonal_offset=self.types.shape[1])
            out = self.model.forward_logits(x, mask, positions, self.cache, use_cache=True)
            if not keep:
                self.cache.crop(-x.shape[1])                     # negative: drop them
        else:
            ids = torch.cat([self.ids, x], -1)
            pos = torch.cat([self.positions, positions], -1)
            mask = masks.attention_mask(k_types, k_blocks, k_types, k_blocks,
                                        diagonal_offset=0)
            out = self.model.forward_logits(ids, mask, pos, **self.prompt.vision)
            out = out[:, -x.shape[1]:]
            if keep:
                self.ids, self.positions = ids, pos
        if keep:
            self.types, self.blocks = k_types, k_blocks
        return out

    def drop(self, keep: torch.Tensor) -> None:
        """Turn the last ``keep.shape[1]`` positions into holes where ``keep`` (B, K) is
        False."""
        k = keep.shape[1]
        self.types = torch.cat([self.types[:, :-k],
                                torch.where(keep, self.types[:, -k:], masks.PAD)], -1)


@torch.no_grad()
def diffusion_decode(model: Wamdiff2Model, batch: dict, cfg: DecodeConfig = DecodeConfig(),
                     use_cache: bool = True, language: AnswerLanguage | None = None,
                     automaton: DeviceAutomaton | None = None,
                     temperatures: list[float] | None = None) -> DecodeOutput:
    """Block-diffusion decode of an encoded prompt batch; with ``language`` (or its compiled
    ``automaton``) every answer is a word of it unless ``cfg.constrained`` is False
    (``decoding.constraints``). ``temperatures``: one per row, replacing
    ``cfg.temperature`` (0: that row greedy, the tokens a greedy decode gives)."""
    cfg = resolve_decode(cfg, model.fields)
    block_size = cfg.block_size or model.fields.block_size
    schedule = transfer_schedule(block_size, cfg.steps_per_block or block_size)
    mask_id, eoa = model.fields.mask_token_id, model.fields.eoa_token_id
    gen = torch.Generator(device=model.device).manual_seed(cfg.seed)
    temperature = cfg.temperature if temperatures is None else \
        torch.tensor(temperatures, dtype=torch.float32, device=model.device)      # (B,)
    stats = DecodeStats(batch=batch["input_ids"].shape[0])

    t0 = time.perf_counter()
    prompt = prepare_prompt(model, batch, block_size)
    ctx = Context(model, prompt, use_cache)
    cons = _constraint(model, cfg, language, automaton, prompt.batch)
    shift, carry = model.fields.shift, ctx.last_logits     # carry: the shifted model's (B, 1, V)
    stats.prefill_ms = _ms(t0)

    t0 = time.perf_counter()
    n_blocks = -(-cfg.max_new_tokens // block_size)
    finished = torch.zeros(prompt.batch, dtype=torch.bool, device=model.device)
    out, confidences = [], []
    for b in range(n_blocks):
        off = b * block_size
        x = torch.full((prompt.batch, block_size), mask_id, dtype=torch.long,
                       device=model.device)
        conf_x = torch.zeros(x.shape, dtype=torch.float32, device=model.device)   # (B, K)
        x[finished] = eoa
        pos = prompt.answer_positions(off, block_size)                       # (3, B, K)
        n_types, n_blocks_ = prompt.answer_layout(off, block_size, masks.NOISY)
        if cons:
            cons.begin_block(off, block_size)
        for step, quota in enumerate(schedule):
            if not unsettled(x, mask_id, eoa).any():     # every answer of the block is settled
                break
            masked = x == mask_id                                            # (B, K)
            check_cancel(stats.forwards + stats.denoise_forwards)
            logits = ctx.logits(x, n_types, n_blocks_, pos, keep=False)
            if shift:
                logits = torch.cat([carry, logits[:, :-1]], 1)               # (B, K, V)
            last = step == len(schedule) - 1
            if cons:
                new = cons.step(x, logits, quota, last, gen, temperature)
                conf = cons.confidence(new)
            else:
                tokens, conf = choose_tokens(logits, mask_id, temperature, gen)
                commit = commit_mask(cfg.commit_rule, conf, masked, quota, last,
                                     cfg.threshold)
                new = torch.where(commit, tokens, x)
            conf_x = torch.where(masked & (new != mask_id), conf, conf_x)   # this step's commits
            x = new
            stats.denoise_forwards += 1
        if cons:
            cons.end_block(x)
        out.append(x)
        confidences.append(conf_x)
        stats.blocks += 1
        finished |= (x == eoa).any(-1)
        if bool(finished.all()) or b == n_blocks - 1:
            break
        c_types, c_blocks = prompt.answer_layout(off, block_size, masks.CLEAN)
        check_cancel(stats.forwards + stats.denoise_forwards)
        committed = ctx.logits(x, c_types, c_blocks, pos, keep=True)         # commit pass
        carry = committed[:, -1:]                                            # (B, 1, V)
        stats.forwards += 1
    stats.forwards += stats.denoise_forwards
    stats.decode_ms = _ms(t0)
    return finish_rows(torch.cat(out, -1)[:, :cfg.max_new_tokens], eoa, stats,
                       torch.cat(confidences, -1)[:, :cfg.max_new_tokens])


@torch.no_grad()
def ar_decode(model: Wamdiff2Model, batch: dict, cfg: DecodeConfig = DecodeConfig(),
              use_cache: bool = True, language: AnswerLanguage | None = None,
              automaton: DeviceAutomaton | None = None) -> DecodeOutput:
    """Token-by-token decode of a next-token (block size 1) model; with ``language`` (or its
    compiled ``automaton``) each token is the best one that keeps the answer a word of it,
    unless ``cfg.constrained`` is False."""
    cfg = resolve_decode(cfg, model.fields)
    mask_id, eoa = model.fields.mask_token_id, model.fields.eoa_token_id
    gen = torch.Generator(device=model.device).manual_seed(cfg.seed)
    stats = DecodeStats(batch=batch["input_ids"].shape[0])

    t0 = time.perf_counter()
    prompt = prepare_prompt(model, batch, 1)
    ctx = Context(model, prompt, use_cache)
    cons = _constraint(model, cfg, language, automaton, prompt.batch)
    done = torch.zeros(prompt.batch, dtype=torch.bool, device=model.device)

    def choose(logits: torch.Tensor, j: int) -> torch.Tensor:               # (B, 1)
        if cons:
            return cons.next_token(logits, j, done, gen)
        tok, _ = choose_tokens(logits, mask_id, cfg.temperature, gen)
        return torch.where(done.unsqueeze(-1), torch.full_like(tok, eoa), tok)

    tok = choose(ctx.last_logits, 0)                                         # (B, 1)
    stats.prefill_ms = _ms(t0)

    t0 = time.perf_counter()
    out = [tok]
    done |= tok[:, 0] == eoa
    for j in range(1, cfg.max_new_tokens):
        if bool(done.all()):
            break
        check_cancel(stats.forwards)
        types, blocks = prompt.answer_layout(j - 1, 1, masks.CLEAN)
        logits = ctx.logits(tok, types, blocks, prompt.answer_positions(j - 1, 1), keep=True)
        tok = choose(logits, j)
        done |= tok[:, 0] == eoa
        out.append(tok)
        stats.forwards += 1
    stats.blocks = len(out)
    stats.decode_ms = _ms(t0)
    return finish_rows(torch.cat(out, -1), eoa, stats)


def decode(model: Wamdiff2Model, batch: dict, cfg: DecodeConfig = DecodeConfig(),
           use_cache: bool = True, language: AnswerLanguage | None = None,
           automaton: DeviceAutomaton | None = None,
           temperatures: list[float] | None = None) -> DecodeOutput:
    """Decode with the paradigm the checkpoint was trained for (``language`` or its compiled
    ``automaton``: the answers' language, enforced unless ``cfg.constrained`` is False);
    ``temperatures``: one per row (block diffusion only)."""
    if model.fields.paradigm == "ar":
        if temperatures is not None:
            raise ValueError("a temperature per row needs a block-diffusion model; this one "
                             "decodes autoregressively")
        return ar_decode(model, batch, cfg, use_cache, language, automaton)
    return diffusion_decode(model, batch, cfg, use_cache, language, automaton, temperatures)
