"""Qwen3-VL's text decoder run against a static KV cache, with the Hugging Face weights.

The prompt (vision encoder, deepstack features, text) is prefilled once by the Hugging Face
model; every later forward is a block of answer tokens (or one AR token), which never touches
image positions, so deepstack features and the vision tower are not needed here. This module
reuses the HF model's weights and rotary embedding, so positions and weights are
bit-compatible with the reference decoder; only the cache and the attention call differ.

Rotary position embedding is transformers' ``apply_rotary_pos_emb`` arithmetic, rearranged
without changing a bit: queries and keys of a layer are rotated together (one set of
operations), ``rotate_half(x) * sin`` is computed as ``x.roll(D/2) * sin'`` with the first
half of ``sin'`` negated once per forward (``(-a) * b == a * (-b)`` exactly).

The forward calls the modules' weights directly (``F.linear`` and ``rms_norm`` below, which
reproduces the HF RMSNorm) rather than the modules: the same arithmetic in the same order, so
the same bits, without ~12 ``nn.Module.__call__`` per layer (hook and dispatch bookkeeping
that is a measurable part of a small model's eager step). The parameters are referenced, not
copied, so a model whose weights change in place (training) or move (``.to``) is still the
model that decodes.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from wamdiff2_core.decoding.static_cache import StaticKVCache
from wamdiff2_core.model.modeling import Wamdiff2Model


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``Qwen3VLTextRMSNorm.forward``, bit for bit (``test_fast_parts`` checks it against the
    module). In fp32 it is one ATen call (``torch.rms_norm`` runs the same sequence in C++
    instead of seven Python-dispatched operations); in bf16/fp16 the module multiplies by the
    weight after casting back, which ``torch.rms_norm`` does not, so the module's own
    operations run."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return torch.rms_norm(x, (x.shape[-1],), weight, eps)
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (B, K, D) -> the tables of ``apply_rope``: cos (B, K, 1, D) and sin with its
    first half negated (B, K, 1, D). Once per forward."""
    half = sin.shape[-1] // 2
    return cos.unsqueeze(2), torch.cat((-sin[..., :half], sin[..., half:]), -1).unsqueeze(2)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """transformers' ``x * cos + rotate_half(x) * sin`` on heads x (B, K, H, D), bit for bit:
    ``rotate_half(x) = cat(-x2, x1)`` and ``roll(x, D/2) = cat(x2, x1)``, the sign moved into
    the table."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_signed


def rows_linear(x: torch.Tensor, weight: torch.Tensor, cut: int) -> torch.Tensor:
    """``F.linear(x, weight)`` for x (B, N, C); with ``cut`` > 0, the first ``cut`` positions
    (a fused commit's finished block) and the rest as two products, each of the shape its
    separate forward has. A GEMM's rounding can depend on its row count (on this CPU a 2-row
    product differs from two 1-row ones in the last bits), so this is what keeps the fused
    step's logits the unfused path's bits at every block size."""
    if not cut:
        return F.linear(x, weight)
    return torch.cat((F.linear(x[:, :cut].contiguous(), weight),
                      F.linear(x[:, cut:].contiguous(), weight)), 1)


class Prefix(NamedTuple):
    """A commit pass fused into a forward (see ``StaticTextModel.forward``): the first ``n``
    positions, their key lengths ``kv_len`` (B,) and the attention they are planned on."""
    n: int
    kv_len: torch.Tensor
    attention: object


class _Layer(NamedTuple):
    """The parameters of one decoder layer that the answer-side forward needs."""
    ln1: torch.Tensor
    ln1_eps: float
    q: torch.Tensor
    q_norm: torch.Tensor
    q_eps: float
    k: torch.Tensor
    k_norm: torch.Tensor
    k_eps: float
    v: torch.Tensor
    o: torch.Tensor
    ln2: torch.Tensor
    ln2_eps: float
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    act: object


def _layer_params(layer) -> _Layer:
    sa, mlp = layer.self_attn, layer.mlp
    for lin in (sa.q_proj, sa.k_proj, sa.v_proj, sa.o_proj, mlp.gate_proj, mlp.up_proj,
                mlp.down_proj):
        if lin.bias is not None:
            raise ValueError("the static text model expects bias-free projections "
                             "(Qwen3-VL's text decoder has none)")
    return _Layer(layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                  sa.q_proj.weight, sa.q_norm.weight, sa.q_norm.variance_epsilon,
                  sa.k_proj.weight, sa.k_norm.weight, sa.k_norm.variance_epsilon,
                  sa.v_proj.weight, sa.o_proj.weight,
                  layer.post_attention_layernorm.weight,
                  layer.post_attention_layernorm.variance_epsilon,
                  mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, mlp.act_fn)


class StaticTextModel:
    """The answer-side text forward of a ``Wamdiff2Model`` (weights shared, not copied)."""

    def __init__(self, model: Wamdiff2Model):
        lm = model.hf.model.language_model
        cfg = lm.config
        self.embed, self.norm = lm.embed_tokens, lm.norm
        self.rotary, self.lm_head = lm.rotary_emb, model.hf.lm_head
        self.params = [_layer_params(layer) for layer in lm.layers]
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
                logits: bool = True, prefix: "Prefix | None" = None,
                keep_prefix: bool = False) -> torch.Tensor | None:
        """One forward of tokens ``ids`` (B, K) at cache ``slots`` (B, K), rotary ``cos``/``sin``
        (B, K, D), attending to the first ``kv_len`` (B,) slots of each row (their own slots
        included: their keys/values are written first). Returns logits (B, K, V), or None
        when ``logits`` is False: a commit pass only fills the cache, so it stops once the
        last layer's keys/values are written (that layer's attention and MLP feed nothing).

        ``prefix`` fuses a commit pass into this forward: the first ``prefix.n`` positions
        are a finished block whose clean keys/values are written at their slots; they attend
        to ``prefix.kv_len`` keys through ``prefix.attention``, produce no logits and are
        dropped once the last layer's keys/values are written. Every other row computes
        exactly what it would in two forwards (row-wise norms and rotary; the products and
        attention calls are the separate forwards' own shapes, ``rows_linear``), so the
        logits (B, K - n, V) are the same bits. With ``keep_prefix`` the finished block's
        rows go on through the last layer too and their logits come first (B, K, V): what its
        separate commit pass would give (a shifted model reads its last row)."""
        b, n = ids.shape
        meta = attention.metadata(kv_len, cache.max_len)
        cut = 0
        if prefix is not None:
            cut = prefix.n
            pre_meta = prefix.attention.metadata(prefix.kv_len, cache.max_len)
        h = self.embed(ids)                                                   # (B, K, H)
        hq, hkv, d = self.num_q_heads, self.num_kv_heads, self.head_dim
        cos, sin = rope_tables(cos, sin)                                      # (B, K, 1, D)
        index = cache.write_index(slots)
        last = self.num_layers - 1
        for i, p in enumerate(self.params):
            x = rms_norm(h, p.ln1, p.ln1_eps)
            q = rms_norm(rows_linear(x, p.q, cut).view(b, n, hq, d), p.q_norm, p.q_eps)
            k = rms_norm(rows_linear(x, p.k, cut).view(b, n, hkv, d), p.k_norm, p.k_eps)
            v = rows_linear(x, p.v, cut).view(b, n, hkv, d)                  # (B, K, Hkv, D)
            qk = apply_rope(torch.cat((q, k), 2), cos, sin)                # (B, K, Hq+Hkv, D)
            q = qk[:, :, :hq]
            cache.write(i, qk[:, :, hq:], v, index)
            if i == last:
                if not logits:
                    return None
                if cut and not keep_prefix:        # the committed rows feed nothing further
                    h, q, cut = h[:, cut:], q[:, cut:], 0
            if cut:
                o = torch.cat((prefix.attention(q[:, :cut], cache.keys(i), cache.values(i),
                                                pre_meta),
                               attention(q[:, cut:], cache.keys(i), cache.values(i), meta)),
                              1)                                              # (B, K, Hq*D)
            else:
                o = attention(q, cache.keys(i), cache.values(i), meta)      # (B, K, Hq*D)
            h = h + rows_linear(o, p.o, cut)
            x = rms_norm(h, p.ln2, p.ln2_eps)
            h = h + rows_linear(p.act(rows_linear(x, p.gate, cut)) * rows_linear(x, p.up, cut),
                                p.down, cut)
        h = rms_norm(h, self.norm.weight, self.norm.variance_epsilon)
        if cut:                                    # keep_prefix: each part its own product
            w, bias = self.lm_head.weight, self.lm_head.bias
            return torch.cat((F.linear(h[:, :cut].contiguous(), w, bias),
                              F.linear(h[:, cut:].contiguous(), w, bias)), 1)  # (B, K, V)
        return F.linear(h, self.lm_head.weight, self.lm_head.bias)            # (B, K, V)
