"""Model inputs of the training layouts.

- Diffusion: ``[prefix | x0 | xt]``. xt (the corrupted answer) sits at the same positions as
  x0; the block-causal mask gives every xt block exactly the view a block being denoised has
  at inference (prefix, committed earlier blocks, itself), and every x0 block the view of a
  commit pass. One forward therefore trains every answer block at once.
- Autoregressive: ``[prefix | answer]`` with the block-size-1 (causal) layout.

Where an answer position's prediction is read (``DiffusionFields.shift``): at the position
itself, or with a shifted model at the position before it, as at inference
(``diffusion_logits``): inside an xt block from the xt position before; the first position
of block k from the last x0 position of block k - 1 (a commit pass's view), of block 0 from
the last prompt position.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff2_core.model import masks
from wamdiff2_core.model.prompt import Prompt, prepare_prompt


@dataclass
class LayoutInputs:
    input_ids: torch.Tensor      # (B, L)
    mask: torch.Tensor           # (B, 1, L, L) bool
    positions: torch.Tensor      # (3, B, L)
    vision: dict
    prompt_len: int              # P (padded prompt width)
    answer_len: int              # A


def diffusion_inputs(model, batch: dict, x0: torch.Tensor, xt: torch.Tensor,
                     block_size: int, prompt: Prompt | None = None) -> LayoutInputs:
    """Inputs of ``[prefix | x0 | xt]`` for prompt ``batch``; x0, xt: (B, A), A a multiple
    of the block size. Logits of the xt part are at ``[:, P + A:]``."""
    prompt = prompt or prepare_prompt(model, batch, block_size)
    a = x0.shape[1]
    types, blocks = masks.training_layout(prompt.valid, a, block_size)
    pos_ans = prompt.answer_positions(0, a)                                 # (3, B, A)
    positions = torch.cat([prompt.positions, pos_ans, pos_ans], -1)
    ids = torch.cat([prompt.input_ids, x0.to(model.device), xt.to(model.device)], -1)
    mask = masks.attention_mask(types, blocks, types, blocks, diagonal_offset=0)
    return LayoutInputs(ids, mask, positions, prompt.vision, prompt.length, a)


def ar_inputs(model, batch: dict, answer: torch.Tensor,
              prompt: Prompt | None = None) -> LayoutInputs:
    """Inputs of ``[prefix | answer]`` with causal attention; the logits at position
    ``P - 1 + i`` predict answer token i."""
    prompt = prompt or prepare_prompt(model, batch, 1)
    a = answer.shape[1]
    c_types, c_blocks = prompt.answer_layout(0, a, masks.CLEAN)
    types = torch.cat([prompt.types, c_types], -1)
    blocks = torch.cat([prompt.blocks, c_blocks], -1)
    positions = torch.cat([prompt.positions, prompt.answer_positions(0, a)], -1)
    ids = torch.cat([prompt.input_ids, answer.to(model.device)], -1)
    mask = masks.attention_mask(types, blocks, types, blocks, diagonal_offset=0)
    return LayoutInputs(ids, mask, positions, prompt.vision, prompt.length, a)


def kept_positions(answer_len: int, shift: bool) -> int:
    """How many trailing positions of ``[prefix | x0 | xt]`` hold the xt predictions: A, or
    with ``shift`` 2A + 1 (the last prompt position, x0 and xt)."""
    return 2 * answer_len + 1 if shift else answer_len


def diffusion_logits(logits: torch.Tensor, answer_len: int, block_size: int,
                     shift: bool) -> torch.Tensor:
    """The predictions (B, A, V) of the xt tokens from the last ``kept_positions`` logits of a
    ``[prefix | x0 | xt]`` forward."""
    if not shift:
        return logits
    a = answer_len
    j = torch.arange(a, device=logits.device)
    # kept: 0 = last prompt position, 1..A = x0, A+1..2A = xt
    index = torch.where(j % block_size == 0, j, a + j)   # block starts: x0[j-1]; else xt[j-1]
    return logits.index_select(1, index)                                  # (B, A, V)
