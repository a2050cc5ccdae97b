"""Qwen3-VL's text decoder run against a static KV cache, with the Hugging Face weights.

The prompt (vision encoder, deepstack features, text) is prefilled once by the Hugging Face
model; every later forward is a block of answer tokens (or one AR token), which never touches
image positions, so deepstack features and the vision tower are not needed here. This module
reuses the HF modules themselves (projections, norms, MLPs, rotary embedding, lm head) and
transformers' ``apply_rotary_pos_emb``, so positions and weights are bit-compatible with the
reference decoder; only the cache and the attention call differ.
"""
from __future__ import annotations

import torch
from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

from wamdiff2_core.decoding.static_cache import StaticKVCache
from wamdiff2_core.model.modeling import Wamdiff2Model


class StaticTextModel:
    """The answer-side text forward of a ``Wamdiff2Model`` (weights shared, not copied)."""

    def __init__(self, model: Wamdiff2Model):
        lm = model.hf.model.language_model
        cfg = lm.config
        self.embed, self.layers, self.norm = lm.embed_tokens, lm.layers, lm.norm
        self.rotary, self.lm_head = lm.rotary_emb, model.hf.lm_head
        self.num_layers = len(lm.layers)
        self.num_q_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_q_heads
        self.scale = self.head_dim ** -0.5
        self.dtype = lm.embed_tokens.weight.dtype
        self.device = lm.embed_tokens.weight.device

    def new_cache(self, batch: int, max_len: int) -> StaticKVCache:
        return StaticKVCache(self.num_layers, batch, self.num_kv_heads, max_len, self.head_dim,
                             self.dtype, self.device)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (B, N, D) of M-RoPE positions (3, B, N), exactly as the HF model computes
        them (interleaved sections)."""
        probe = torch.empty(0, dtype=self.dtype, device=self.device)
        return self.rotary(probe, positions)

    def forward(self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                slots: torch.Tensor, kv_len: torch.Tensor, cache: StaticKVCache, attention,
                logits: bool = True) -> torch.Tensor | None:
        """One forward of tokens ``ids`` (B, K) at cache ``slots`` (B, K), rotary ``cos``/``sin``
        (B, K, D), attending to the first ``kv_len`` (B,) slots of each row (their own slots
        included: their keys/values are written first). Returns logits (B, K, V), or None
        when ``logits`` is False (a commit pass only fills the cache)."""
        b, n = ids.shape
        meta = attention.metadata(kv_len, cache.max_len)
        h = self.embed(ids)                                                   # (B, K, H)
        for i, layer in enumerate(self.layers):
            sa = layer.self_attn
            x = layer.input_layernorm(h)
            q = sa.q_norm(sa.q_proj(x).view(b, n, self.num_q_heads, self.head_dim))
            k = sa.k_norm(sa.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim))
            v = sa.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim)    # (B, K, Hkv, D)
            q, k = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
            cache.write(i, k, v, slots)
            o = attention(q, cache.keys(i), cache.values(i), meta)          # (B, K, Hq*D)
            h = h + sa.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        if not logits:
            return None
        return self.lm_head(self.norm(h))                                     # (B, K, V)
