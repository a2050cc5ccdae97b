"""Block-causal attention as pure index functions.

Every position carries a *type* and a *block id*:

- ``PREFIX`` (0): the prompt (image and text). The prompt is cut into blocks of B tokens from
  its first real token, with bidirectional attention inside each chunk and causal attention
  between chunks. This is what the reference repository does at training and inference, so
  the prompt's KV cache depends on B; we keep it so reference checkpoints behave as trained.
- ``CLEAN`` (1): committed answer tokens (x0). Answer blocks start at the prompt length; their
  block ids continue after the last prompt chunk.
- ``NOISY`` (2): the corrupted copy of the answer (xt) that the model denoises.

Visibility (query q may attend to key k):

- PREFIX -> PREFIX keys of the same or an earlier chunk.
- CLEAN  -> every PREFIX key, CLEAN keys of the same or an earlier block. Never NOISY keys:
  at inference a committed block is computed from clean tokens only (the reference training
  mask let clean tokens see noisy copies, which inference never does).
- NOISY  -> every PREFIX key, CLEAN keys of strictly earlier blocks, NOISY keys of its own
  block. This is exactly what a block being denoised against the exact prefix cache sees.

Padding (type ``PAD``) is invisible to every query; a padding query sees only itself so that
no attention row is empty (an empty row makes SDPA return NaN).
"""
from __future__ import annotations

import torch

PAD, PREFIX, CLEAN, NOISY = -1, 0, 1, 2


def visible(q_type: int, q_block: int, k_type: int, k_block: int) -> bool:
    """The scalar rule: may a query of (type, block) attend to a key of (type, block)?"""
    if q_type == PAD or k_type == PAD:
        return False
    if q_type == PREFIX:
        return k_type == PREFIX and k_block <= q_block
    if q_type == CLEAN:
        return k_type == PREFIX or (k_type == CLEAN and k_block <= q_block)
    if q_type == NOISY:
        return (k_type == PREFIX or (k_type == CLEAN and k_block < q_block)
                or (k_type == NOISY and k_block == q_block))
    raise ValueError(f"unknown token type {q_type}")


def visibility(q_types: torch.Tensor, q_blocks: torch.Tensor,
               k_types: torch.Tensor, k_blocks: torch.Tensor) -> torch.Tensor:
    """Vectorised ``visible``: (..., Lq) x (..., Lk) index tensors -> (..., Lq, Lk) bool."""
    tq, bq = q_types.unsqueeze(-1), q_blocks.unsqueeze(-1)  # (..., Lq, 1)
    tk, bk = k_types.unsqueeze(-2), k_blocks.unsqueeze(-2)  # (..., 1, Lk)
    prefix_q = (tq == PREFIX) & (tk == PREFIX) & (bk <= bq)
    clean_q = (tq == CLEAN) & ((tk == PREFIX) | ((tk == CLEAN) & (bk <= bq)))
    noisy_q = (tq == NOISY) & ((tk == PREFIX) | ((tk == CLEAN) & (bk < bq))
                               | ((tk == NOISY) & (bk == bq)))
    return (prefix_q | clean_q | noisy_q) & (tq != PAD) & (tk != PAD)


def prompt_layout(valid: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Types and block ids of a (left-padded) prompt batch.

    valid: (B, P) bool, True on real tokens. Chunks are counted from each row's first real
    token, so a padded row gets the same chunks as the same prompt alone.
    Returns (types, blocks), each (B, P) int64.
    """
    valid = valid.bool()
    rank = valid.long().cumsum(-1) - 1                       # (B, P) index among real tokens
    types = torch.where(valid, PREFIX, PAD).long()
    blocks = torch.where(valid, rank.clamp(min=0) // block_size, -1).long()
    return types, blocks


def num_prompt_blocks(valid: torch.Tensor, block_size: int) -> torch.Tensor:
    """(B,) number of prompt chunks per row: the first answer block's id."""
    n = valid.bool().sum(-1)
    return (n + block_size - 1) // block_size


def answer_layout(first_block: torch.Tensor, offset: int, length: int, block_size: int,
                  token_type: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Types and block ids of ``length`` answer positions starting ``offset`` tokens into the
    answer. first_block: (B,) id of the first answer block. Returns two (B, length) tensors."""
    rel = torch.arange(offset, offset + length, device=first_block.device) // block_size
    blocks = first_block.long().unsqueeze(-1) + rel                      # (B, length)
    return torch.full_like(blocks, token_type), blocks


def training_layout(valid_prefix: torch.Tensor, answer_len: int,
                    block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training sequence ``[prefix | x0 | xt]`` for answers of ``answer_len`` tokens
    (a multiple of the block size). Returns types and block ids, (B, P + 2 * answer_len)."""
    if answer_len % block_size:
        raise ValueError(f"answer length {answer_len} is not a multiple of block {block_size}")
    p_types, p_blocks = prompt_layout(valid_prefix, block_size)
    first = num_prompt_blocks(valid_prefix, block_size)
    c_types, c_blocks = answer_layout(first, 0, answer_len, block_size, CLEAN)
    n_types, n_blocks = answer_layout(first, 0, answer_len, block_size, NOISY)
    return (torch.cat([p_types, c_types, n_types], -1),
            torch.cat([p_blocks, c_blocks, n_blocks], -1))


def attention_mask(q_types: torch.Tensor, q_blocks: torch.Tensor, k_types: torch.Tensor,
                   k_blocks: torch.Tensor, diagonal_offset: int | None = None) -> torch.Tensor:
    """The 4-D boolean SDPA mask (B, 1, Lq, Lk), True = attend.

    ``diagonal_offset`` is where query i sits among the keys (Lk - Lq when the queries are the
    last keys). Padding queries there see themselves so no row is empty.
    """
    mask = visibility(q_types, q_blocks, k_types, k_blocks)             # (B, Lq, Lk)
    if diagonal_offset is not None:
        lq = q_types.shape[-1]
        idx = torch.arange(lq, device=mask.device)
        pad_q = (q_types == PAD)                                          # (B, Lq)
        eye = torch.zeros_like(mask)
        eye[:, idx, idx + diagonal_offset] = True
        mask = mask | (eye & pad_q.unsqueeze(-1))
    return mask.unsqueeze(1)
