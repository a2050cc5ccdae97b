"""The optimised AR baseline: token-by-token decoding of a next-token model with the same
static KV cache, fixed-shape step and graphs/compile as the fast diffusion decoder, so every
diffusion speed-up is measured against an optimised AR decoder. Same tokens as
``reference.ar_decode``.

The step reads a device counter ``c`` (the answer offset of the token being fed): it takes
the rotary row ``c``, writes K/V at slot ``n_i + c``, attends to ``n_i + c + 1`` keys, picks
the next token, writes it to ``out[:, c + 1]`` and advances ``c``. Rows that ended keep
emitting end-of-answer. The host checks the done flags every ``sync_every`` tokens.
"""
from __future__ import annotations

import time

import torch

from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.constraints.session import FastConstraint
from wamdiff2_core.decoding.graphs import STEP_MODES
from wamdiff2_core.decoding.output import DecodeOutput, DecodeStats, finish_rows
from wamdiff2_core.decoding.runner import FastRunner, sync
from wamdiff2_core.decoding.sampling import choose_tokens
from wamdiff2_core.model.prompt import prepare_prompt


class ARState:
    """Static cache, buffers and the compiled or captured step of one (batch bucket, greedy?)
    shape. ``max_len`` bounds prompt + answer per row."""

    def __init__(self, runner: FastRunner, batch: int, greedy: bool, max_len: int,
                 auto: DeviceAutomaton | None = None):
        self.text, dev = runner.text, runner.device
        f = runner.model.fields
        self.mask_id, self.eoa, self.greedy = f.mask_token_id, f.eoa_token_id, greedy
        self.batch = batch
        # constrained: each token is a one-position block of the answer's language
        self.cons = auto and FastConstraint(auto, batch, 1, self.mask_id, self.eoa)
        self.cache = self.text.new_cache(batch, max_len)
        self.attn = runner.new_attention(batch, 1, max_len)
        long = dict(dtype=torch.long, device=dev)
        self.tok = torch.full((batch, 1), self.eoa, **long)                    # (Bb, 1)
        self.c = torch.zeros(1, **long)                                        # answer offset
        self.base = torch.zeros(batch, **long)                                 # prompt lengths
        self.cos = torch.zeros(batch, max_len, self.text.head_dim, dtype=self.text.dtype,
                               device=dev)                                     # (Bb, L, D)
        self.sin = torch.zeros_like(self.cos)                                  # (Bb, L, D)
        self.out = torch.full((batch, max_len), self.eoa, **long)              # (Bb, L)
        self.done = torch.ones(batch, dtype=torch.bool, device=dev)            # (Bb,)

        self.attn.plan([1] * batch)          # a plan must exist before warm-up / capture
        # greedy: forward and select as one compiled or captured step; sampling: the forward
        # alone, select eager on the real rows with the reference's random stream
        self.step = STEP_MODES[runner.mode](self.greedy_step if greedy else self.forward,
                                            pool=runner.pool, device=dev)

    def greedy_step(self) -> None:
        """``forward``, then ``select`` greedily for every row of the bucket."""
        self.select(self.forward(), 0.0, None, self.batch)

    def forward(self) -> torch.Tensor:
        """Logits (Bb, 1, V) of the token at answer offset ``c``, its K/V written at slot
        ``base + c``."""
        cos = self.cos.index_select(1, self.c)                                 # (Bb, 1, D)
        sin = self.sin.index_select(1, self.c)
        slots = (self.base + self.c).unsqueeze(-1)                             # (Bb, 1)
        return self.text.forward(self.tok, cos, sin, slots, self.base + self.c + 1,
                                 self.cache, self.attn)                        # (Bb, 1, V)

    def choose(self, logits: torch.Tensor, temperature: float, gen, rows: int,
               offset: torch.Tensor) -> torch.Tensor:
        """Next token (R, 1) of the first ``rows`` rows at answer ``offset`` (end-of-answer
        once a row has ended)."""
        done = self.done[:rows]
        if self.cons:
            cols = self.cons.take_logits(logits)[:rows]
            return self.cons.next_token(cols, done, offset, temperature, gen)
        nxt, _ = choose_tokens(logits[:rows], self.mask_id, temperature, gen)  # (R, 1)
        return torch.where(done.unsqueeze(-1), self.eoa, nxt)

    def select(self, logits: torch.Tensor, temperature: float, gen, rows: int) -> None:
        """Next token of the first ``rows`` rows (end-of-answer once a row has ended)."""
        nxt = self.choose(logits, temperature, gen, rows, self.c + 1)
        done = self.done[:rows]
        done.logical_or_(nxt[:, 0] == self.eoa)
        self.out[:rows].index_copy_(1, self.c + 1, nxt)
        self.tok[:rows].copy_(nxt)
        self.c.add_(1)

    def run_step(self, temperature: float, gen, rows: int) -> None:
        out = self.step()
        if not self.greedy:
            self.select(out, temperature, gen, rows)


@torch.no_grad()
def decode(runner: FastRunner, batch: dict, cfg: DecodeConfig,
           auto: DeviceAutomaton | None = None) -> DecodeOutput:
    """Token-by-token decode of a next-token model; same tokens as the reference. With
    ``auto``, every answer is a word of its language. ``engine.DecodingEngine.decode`` is
    the caller."""
    model = runner.model
    with runner.no_autograd():
        eoa = model.fields.eoa_token_id
        gen = torch.Generator(device=model.device).manual_seed(cfg.seed)
        rows = batch["input_ids"].shape[0]
        stats = DecodeStats(batch=rows)
        bucket = runner.bucket(rows)
        greedy = cfg.temperature == 0
        n = cfg.max_new_tokens
        key = ("ar", bucket, greedy) + ((auto.language,) if auto else ())
        state: ARState = runner.state(key, batch["input_ids"].shape[1] + n,
                                      lambda length: ARState(runner, bucket, greedy, length,
                                                             auto))

        t0 = time.perf_counter()
        prompt = prepare_prompt(model, batch, 1)
        keys_values, last_logits, lengths = runner.prefill(prompt)
        state.done.zero_()
        state.c.zero_()
        if state.cons:
            state.cons.start(n, rows)
        tok = state.choose(last_logits, cfg.temperature, gen, rows, state.c)            # (B, 1)
        state.cache.load_prefill(keys_values, lengths)
        state.base.copy_(runner.row_lengths(lengths, bucket))
        cos, sin = runner.rope_rows(prompt, bucket, n)                                 # (Bb, N, D)
        state.cos[:, :n] = cos
        state.sin[:, :n] = sin
        state.tok.fill_(eoa)
        state.tok[:rows] = tok
        state.out.fill_(eoa)
        state.out[:rows, :1] = tok
        state.done.copy_(state.tok[:, 0] == eoa)       # padding rows hold eoa: done from the start
        state.c.zero_()
        sync(runner.device)
        stats.prefill_ms = (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        for j in range(1, n):
            if (j - 1) % runner.sync_every == 0 and bool(state.done.all()):   # the done-check
                break
            check_cancel(stats.forwards)
            state.attn.plan([m + j for m in lengths] + [j] * (bucket - rows))
            state.run_step(cfg.temperature, gen, rows)
            stats.forwards += 1
        stats.blocks = stats.forwards + 1
        sync(runner.device)
        stats.decode_ms = (time.perf_counter() - t0) * 1e3
        return finish_rows(state.out[:rows, :stats.blocks], eoa, stats)
