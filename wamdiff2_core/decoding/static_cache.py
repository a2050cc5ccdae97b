"""A KV cache allocated once and written at position tensors.

Layout: one tensor ``kv`` of shape (layers, 2, batch, kv_heads, max_len, head_dim). Each row
is *packed*: its real prompt tokens occupy slots ``0 .. n_i - 1`` (the left padding of the
prompt batch is dropped when the prefill is loaded), and answer token ``t`` of row ``i`` lives
at slot ``n_i + t``. A row's visible keys are therefore exactly its first ``kv_len[i]`` slots:
no padding holes, so an attention kernel needs only a key length per row (FlashInfer's paged
layout with one page per row), and SDPA needs only ``slot < kv_len``.

Slots at or beyond a row's length hold stale or zero values; they are never attended to.
The cache starts zeroed so that masked-out values are always finite (0 * NaN would leak).
"""
from __future__ import annotations

from typing import Sequence

import torch
from transformers.cache_utils import DynamicCache


class StaticKVCache:
    """Keys and values of ``layers`` attention layers for ``batch`` rows of ``max_len`` slots."""

    def __init__(self, layers: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        self.kv = torch.zeros(layers, 2, batch, kv_heads, max_len, head_dim, dtype=dtype,
                              device=device)   # (layers, 2, B, Hkv, L, D)

    @property
    def max_len(self) -> int:
        return self.kv.shape[4]

    def keys(self, layer: int) -> torch.Tensor:
        """(B, Hkv, L, D) keys of one layer (a contiguous view: one FlashInfer page per row)."""
        return self.kv[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        return self.kv[layer, 1]

    def write_index(self, slots: torch.Tensor) -> torch.Tensor:
        """The scatter index of ``slots`` (B, K) for ``write``: (2, B, Hkv, K, D), the same for
        every layer of a forward (build it once)."""
        heads, dim = self.kv.shape[3], self.kv.shape[5]
        return slots[None, :, None, :, None].expand(2, -1, heads, -1, dim)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> None:
        """Write keys/values k, v (B, K, Hkv, D) of one layer at the slots that ``index``
        (``write_index(slots)``) holds, in one scatter. Fixed shapes, no host
        synchronisation."""
        kv = torch.stack((k.transpose(1, 2), v.transpose(1, 2)))             # (2, B, Hkv, K, D)
        self.kv[layer].scatter_(3, index, kv)

    def load_prefill(self, cache: DynamicCache, lengths: Sequence[int]) -> None:
        """Copy a left-padded prefill cache (rows of width P, row i's real tokens the last
        ``lengths[i]``) into the first rows of this cache, packed from slot 0."""
        if max(lengths) > self.max_len:
            raise ValueError(f"prompt of {max(lengths)} tokens exceeds the static cache "
                             f"({self.max_len} slots)")
        keys = torch.stack([layer.keys for layer in cache.layers])        # (layers, B, Hkv, P, D)
        values = torch.stack([layer.values for layer in cache.layers])
        width = keys.shape[3]
        for i, n in enumerate(lengths):
            self.kv[:, 0, i, :, :n] = keys[:, i, :, width - n:]
            self.kv[:, 1, i, :, :n] = values[:, i, :, width - n:]


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
