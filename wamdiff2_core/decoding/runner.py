"""The device side of fast decoding for one model (nano-vllm's model runner: in order,
resolve mode and attention backend -> prefill -> allocate the static cache -> warm up and
capture the step graphs -> replay).

``FastRunner`` holds what every fast decoder of a model shares: the compact text forward,
the execution mode, the attention backend choice, the graph memory pool, and the per-shape
states of this model (static cache + buffers + compiled/captured steps), built once per
(kind, batch bucket, block size, ...) and reused across calls; nothing of another model
lives here (exact mode's verifier has a runner of its own). Its owner is a
``engine.DecodingEngine``, which serialises the calls that use it.
"""
from __future__ import annotations

import time
import warnings

import torch

from wamdiff2_core.decoding.attention import ATTENTION_BACKENDS, resolve_attention
from wamdiff2_core.decoding.config import FastConfig
from wamdiff2_core.decoding.graphs import COMPILED_MODES, GRAPH_MODES, new_pool, resolve_mode
from wamdiff2_core.decoding.static_cache import round_up
from wamdiff2_core.decoding.static_model import StaticTextModel
from wamdiff2_core.model.modeling import Wamdiff2Model, new_cache
from wamdiff2_core.model.prompt import Prompt


def sync(device: torch.device) -> None:
    """Wait for queued device work (timings only; never inside a step)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class FastRunner:
    """Owns the fast decoding state of one model on its device."""

    def __init__(self, model: Wamdiff2Model, cfg: FastConfig = FastConfig()):
        self.model, self.cfg = model, cfg
        self.text = StaticTextModel(model)
        self.device = self.text.device
        self.mode = resolve_mode(cfg.mode, self.device, cfg.enforce_eager)
        # torch.compile would trace into FlashInfer's Python planning code: compiled steps
        # use SDPA unless FlashInfer is asked for by name.
        wanted = "sdpa" if cfg.attention == "auto" and self.mode in COMPILED_MODES \
            else cfg.attention
        self.attention = resolve_attention(wanted, self.device, self.text.dtype,
                                           self.text.head_dim)
        self.sync_every = cfg.sync_every or (2 if self.device.type == "cuda" else 1)
        self.fuse_commit = cfg.fuse_commit
        self.pool = new_pool(self.mode)
        self.states: dict[tuple, object] = {}
        self.build_s = 0.0                 # time spent building states (compile / capture)

    def no_autograd(self):
        """The context a decode runs in: inference mode in eager mode (less per-op overhead;
        the state's buffers become inference tensors, only ever touched by decodes), no_grad
        for compiled steps and CUDA graphs."""
        return torch.inference_mode() if self.mode == "eager" else torch.no_grad()

    # ------------------------------------------------------------------ shapes
    def bucket(self, batch: int) -> int:
        """The batch size a state is built for: the smallest bucket that holds ``batch``
        (``batch`` itself when not padding)."""
        pad = self.cfg.pad_batch if self.cfg.pad_batch is not None else self.mode != "eager"
        if not pad:
            return batch
        for b in self.cfg.batch_buckets:
            if b >= batch:
                return b
        return round_up(batch, self.cfg.batch_buckets[-1])

    def cache_len(self, needed: int) -> int:
        return round_up(max(needed, self.cfg.min_len), self.cfg.len_multiple)

    def state(self, key: tuple, needed_len: int, build, fits=None):
        """The state for ``key`` with a cache of at least ``needed_len`` slots (and, with
        ``fits``, one that ``fits(state)`` accepts: exact mode's verify state must be the one
        built for the drafter's current state); ``build(L)`` creates one (and is timed into
        ``build_s``)."""
        st = self.states.get(key)
        if st is None or st.cache.max_len < needed_len or (fits is not None and not fits(st)):
            t0 = time.perf_counter()
            self.states.pop(key, None)
            try:
                st = build(self.cache_len(needed_len))
            except Exception as exc:                   # noqa: BLE001 - any kernel failure
                if not (self.attention == "flashinfer" and self.cfg.attention == "auto"):
                    raise
                # FlashInfer was only preferred, not asked for: keep decoding with SDPA.
                warnings.warn(f"FlashInfer failed while building a decoder state ({exc}); "
                              "falling back to SDPA attention")
                self.attention = "sdpa"
                self.states.clear()
                st = build(self.cache_len(needed_len))
            sync(self.device)
            self.build_s += time.perf_counter() - t0
            self.states[key] = st
        return st

    def new_attention(self, batch: int, qo_len: int, max_len: int):
        t = self.text
        extra = {"backend": self.cfg.flashinfer_backend} if self.attention == "flashinfer" \
            else {"trim": self.mode == "eager"}
        return ATTENTION_BACKENDS[self.attention](
            num_q_heads=t.num_q_heads, num_kv_heads=t.num_kv_heads, head_dim=t.head_dim,
            scale=t.scale, batch=batch, qo_len=qo_len, max_len=max_len, dtype=t.dtype,
            device=self.device, use_cuda_graph=self.mode in GRAPH_MODES, **extra)

    # ------------------------------------------------------------------ prefill
    def prefill(self, prompt: Prompt):
        """Run the prompt once through the HF model (vision, deepstack, text) exactly as the
        reference decoder does. Returns the dynamic cache, the logits at the last prompt
        position (B, 1, V) and the real prompt length of each row (host list)."""
        cache = new_cache(self.model)
        out = self.model.forward_logits(prompt.input_ids, prompt.prefill_mask(),
                                        prompt.positions, cache, use_cache=True,
                                        **prompt.vision)
        lengths = prompt.valid.sum(-1).tolist()
        return cache, out[:, -1:], lengths

    def rope_rows(self, prompt: Prompt, rows: int, length: int):
        """cos, sin (rows, length, D) of answer offsets 0..length-1; padding rows (beyond the
        prompt batch) get position 0."""
        pos = prompt.answer_positions(0, length)                              # (3, B, N)
        if rows > prompt.batch:
            pad = pos.new_zeros(3, rows - prompt.batch, length)
            pos = torch.cat([pos, pad], 1)
        return self.text.rope(pos)

    def row_lengths(self, lengths: list[int], rows: int) -> torch.Tensor:
        """(rows,) long prompt lengths on the device; padding rows have length 0."""
        return torch.tensor(lengths + [0] * (rows - len(lengths)), dtype=torch.long,
                            device=self.device)
