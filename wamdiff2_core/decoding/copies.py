"""K rows of one prompt (candidate plans: one image, one prompt, rows sampled apart).

The reference decoder reads K identical rows of the encoded batch (``repeat_batch``); the
fast decoder prefills the prompt once and copies its keys and values to K rows of the
static cache, so the vision encoder and the prompt run once whatever K is
(``repeat_prompt`` lays the K rows out for the answer positions). Both give each row the
tokens it would get as a row of K identical prompts.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from wamdiff2_core.model.prompt import Prompt

#: Keys of an encoded batch (``processor.encode_prompts``) with one entry per row.
ROW_KEYS = ("input_ids", "valid", "mm_token_type_ids")
#: Keys with one entry per image (all rows' images concatenated in row order).
IMAGE_KEYS = ("pixel_values", "image_grid_thw")


def repeat_batch(batch: dict, rows: int) -> dict:
    """An encoded batch of one prompt as ``rows`` identical rows."""
    if batch["input_ids"].shape[0] != 1:
        raise ValueError(f"copies of a prompt need a batch of one prompt, got "
                         f"{batch['input_ids'].shape[0]}")
    out = dict(batch)
    for key in ROW_KEYS + IMAGE_KEYS:
        value = batch.get(key)
        if value is not None:
            out[key] = value.repeat(rows, *([1] * (value.dim() - 1)))
    return out


def repeat_prompt(prompt: Prompt, rows: int) -> Prompt:
    """A laid-out prompt of one row as ``rows`` identical rows (its images apart: they are
    read by the prefill alone)."""
    def rep(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return t.repeat_interleave(rows, dim=dim)
    return replace(prompt, input_ids=rep(prompt.input_ids), valid=rep(prompt.valid),
                   types=rep(prompt.types), blocks=rep(prompt.blocks),
                   positions=rep(prompt.positions, 1), answer_start=rep(prompt.answer_start),
                   first_block=rep(prompt.first_block), vision={})
