"""Attention backends of the fast decoder: a block of queries against the static KV cache.

Every backend answers one question: queries q (B, K, Hq, D) of the rows' current block (or
AR token) against the first ``kv_len[i]`` slots of row i's cache. The cache is packed (see
``static_cache``) and the block's own keys are already written at its slots, so what the
block-causal mask demands reduces to a key length per row: NOISY queries see the prompt, the
committed blocks and their own block; a commit pass sees the same keys. No mask is built for
FlashInfer; SDPA gets the equivalent (B, 1, 1, L) key-validity mask.

Backends (registry ``ATTENTION_BACKENDS``):

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` with grouped-query heads
  packed into the query axis (no key/value repetition). Any device. With ``trim`` (eager
  mode, where shapes need not stay fixed) it reads only the first ``max(kv_lens)`` slots of
  the cache that ``plan`` was given, and builds no mask at all when every row sees the same
  number of keys (batch 1): a cache sized for the longest request is mostly empty early on.
- ``flashinfer``: FlashInfer's batch prefill kernel over a paged cache with one page per row
  (HND layout, page size = the cache length). CUDA only; ``plan`` runs on the host before
  each block (AR: each token), outside any CUDA graph.
"""
from __future__ import annotations

import importlib.util
from typing import Sequence

import torch
import torch.nn.functional as F

WORKSPACE_BYTES = 128 * 1024 * 1024


def flashinfer_available(device: torch.device | str) -> bool:
    """FlashInfer is importable and ``device`` is a CUDA device."""
    return (torch.device(device).type == "cuda" and torch.cuda.is_available()
            and importlib.util.find_spec("flashinfer") is not None)


class SdpaAttention:
    """Scaled dot-product attention with a key-validity mask (any device)."""

    def __init__(self, num_q_heads: int, num_kv_heads: int, head_dim: int, scale: float,
                 trim: bool = False, **_):
        self.hq, self.hkv, self.d, self.scale = num_q_heads, num_kv_heads, head_dim, scale
        self.trim = trim
        self.limit: int | None = None       # trim: slots read (the longest row's key length)
        self.uniform = False                # trim: every row has ``limit`` keys (no mask)

    def plan(self, kv_lens: Sequence[int]) -> None:
        """Without ``trim`` nothing is planned on the host (lengths are read from ``kv_len``
        inside the step). With ``trim``, the slots to read and whether a mask is needed."""
        if self.trim:
            self.limit, self.uniform = max(kv_lens), min(kv_lens) == max(kv_lens)

    def metadata(self, kv_len: torch.Tensor, max_len: int) -> torch.Tensor | None:
        """(B, 1, 1, L) bool: slot < kv_len of its row (L: the slots read). Built once per
        forward; None when trimming to rows of equal length. (Before any ``plan`` a trimming
        backend reads every slot.)"""
        if self.trim and self.limit is not None:
            if self.uniform:
                return None
            max_len = self.limit
        slots = torch.arange(max_len, device=kv_len.device)
        return (slots.unsqueeze(0) < kv_len.unsqueeze(1))[:, None, None, :]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 meta: torch.Tensor) -> torch.Tensor:
        """q (B, K, Hq, D), k/v (B, Hkv, L, D) -> (B, K, Hq * D)."""
        b, n, hq, d = q.shape
        rep = hq // self.hkv
        if self.trim and self.limit is not None:
            k, v = k[:, :, :self.limit], v[:, :, :self.limit]
        # Head h reads kv head h // rep: group each kv head's query heads along the query axis.
        qg = q.permute(0, 2, 1, 3).reshape(b, self.hkv, rep * n, d)        # (B, Hkv, rep*K, D)
        o = F.scaled_dot_product_attention(qg, k, v, attn_mask=meta, scale=self.scale)
        # reshape, not view: CUDA kernels may return o with the query axis not contiguous.
        return o.reshape(b, hq, n, d).transpose(1, 2).reshape(b, n, hq * d)


class FlashInferAttention:
    """FlashInfer batch prefill/append attention on the static cache (CUDA only).

    The cache of one layer, (B, Hkv, L, D), is read as a paged cache in HND layout with one
    page of L slots per row; ``plan`` gives each row its key length (its last-page length).
    With ``use_cuda_graph`` the wrapper's index buffers are preallocated so a captured run
    stays valid across plans of the same batch size.
    """

    def __init__(self, num_q_heads: int, num_kv_heads: int, head_dim: int, scale: float,
                 batch: int, qo_len: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str, use_cuda_graph: bool = False, backend: str = "auto"):
        import flashinfer

        self.hq, self.hkv, self.d, self.scale = num_q_heads, num_kv_heads, head_dim, scale
        self.batch, self.qo_len, self.max_len, self.dtype = batch, qo_len, max_len, dtype
        device = torch.device(device)
        i32 = dict(dtype=torch.int32)
        # Host-side page tables (one page per row); only the last-page lengths change.
        self.qo_indptr = torch.arange(0, (batch + 1) * qo_len, qo_len, **i32)
        self.kv_indptr = torch.arange(batch + 1, **i32)
        self.kv_indices = torch.arange(batch, **i32)
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        buffers = {}
        if use_cuda_graph:
            buffers = dict(qo_indptr_buf=self.qo_indptr.to(device),
                           paged_kv_indptr_buf=self.kv_indptr.to(device),
                           paged_kv_indices_buf=self.kv_indices.to(device),
                           paged_kv_last_page_len_buf=torch.ones(batch, device=device, **i32))
        self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            workspace, "HND", use_cuda_graph=use_cuda_graph, backend=backend, **buffers)

    def plan(self, kv_lens: Sequence[int]) -> None:
        """Give row i a key length ``kv_lens[i]`` (1 <= length <= L). Host side; call it
        before running (or replaying) the step, never inside a captured graph."""
        last = torch.tensor(list(kv_lens), dtype=torch.int32)
        self.wrapper.plan(self.qo_indptr, self.kv_indptr, self.kv_indices, last,
                          self.hq, self.hkv, self.d, self.max_len, causal=False,
                          sm_scale=self.scale, q_data_type=self.dtype, kv_data_type=self.dtype)

    def metadata(self, kv_len: torch.Tensor, max_len: int) -> None:
        return None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 meta: None) -> torch.Tensor:
        """q (B, K, Hq, D), k/v (B, Hkv, L, D) -> (B, K, Hq * D)."""
        b, n, hq, d = q.shape
        o = self.wrapper.run(q.reshape(b * n, hq, d), (k, v))              # (B*K, Hq, D)
        return o.view(b, n, hq * d)


ATTENTION_BACKENDS = {"sdpa": SdpaAttention, "flashinfer": FlashInferAttention}


FLASHINFER_HEAD_DIMS = (64, 128, 256)          # kernels shipped precompiled
FLASHINFER_DTYPES = (torch.float16, torch.bfloat16)


def resolve_attention(name: str, device: torch.device | str, dtype: torch.dtype,
                      head_dim: int) -> str:
    """The backend a request for ``name`` ("auto", "sdpa", "flashinfer") gets: "auto" means
    FlashInfer where the package is installed, the device is a GPU and the model is fp16/bf16
    with a head size FlashInfer ships kernels for; SDPA elsewhere."""
    fits = (flashinfer_available(device) and dtype in FLASHINFER_DTYPES
            and head_dim in FLASHINFER_HEAD_DIMS)
    if name == "auto":
        return "flashinfer" if fits else "sdpa"
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; "
                         f"known: auto, {', '.join(ATTENTION_BACKENDS)}")
    if name == "flashinfer" and not fits:
        raise ValueError("the flashinfer backend needs a CUDA device, the flashinfer package "
                         "(pip install '.[gpu]'), an fp16/bf16 model and a head size in "
                         f"{FLASHINFER_HEAD_DIMS}")
    return name
