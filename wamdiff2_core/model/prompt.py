"""A prompt batch laid out for block decoding: ids, block-causal layout and M-RoPE positions."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff2_core.model import masks


@dataclass
class Prompt:
    input_ids: torch.Tensor          # (B, P) left-padded
    valid: torch.Tensor              # (B, P) bool
    types: torch.Tensor              # (B, P) PREFIX / PAD
    blocks: torch.Tensor             # (B, P) prompt chunk ids (-1 on padding)
    positions: torch.Tensor          # (3, B, P) M-RoPE positions
    answer_start: torch.Tensor       # (B,) text position of the first answer token
    first_block: torch.Tensor        # (B,) block id of the first answer block
    vision: dict                     # pixel_values, image_grid_thw, mm_token_type_ids
    block_size: int

    @property
    def batch(self) -> int:
        return self.input_ids.shape[0]

    @property
    def length(self) -> int:
        return self.input_ids.shape[1]

    def prefill_mask(self) -> torch.Tensor:
        """(B, 1, P, P) mask of the prompt prefill."""
        return masks.attention_mask(self.types, self.blocks, self.types, self.blocks,
                                    diagonal_offset=0)

    def answer_positions(self, offset: int, length: int) -> torch.Tensor:
        """(3, B, length) positions of answer tokens offset..offset+length."""
        rel = torch.arange(offset, offset + length, device=self.answer_start.device)
        pos = self.answer_start.unsqueeze(-1) + rel                      # (B, length)
        return pos.unsqueeze(0).expand(3, -1, -1)

    def answer_layout(self, offset: int, length: int, token_type: int):
        """(types, blocks) of answer positions offset..offset+length, each (B, length)."""
        return masks.answer_layout(self.first_block, offset, length, self.block_size,
                                   token_type)


def prepare_prompt(model, batch: dict, block_size: int) -> Prompt:
    """Lay out an encoded prompt batch (from ``Wamdiff2Processor.encode_prompts``)."""
    dev = model.device
    input_ids = batch["input_ids"].to(dev)
    valid = batch["valid"].to(dev)
    mm = batch["mm_token_type_ids"].to(dev)
    grid = batch.get("image_grid_thw")
    grid = grid.to(dev) if grid is not None else None
    pixels = batch.get("pixel_values")
    pixels = pixels.to(dev, dtype=next(model.hf.parameters()).dtype) if pixels is not None \
        else None
    positions, _ = model.rope_positions(input_ids, mm, valid, grid)
    masked_pos = torch.where(valid.unsqueeze(0), positions, torch.zeros_like(positions))
    answer_start = masked_pos.amax(dim=(0, 2)) + 1                        # (B,)
    types, blocks = masks.prompt_layout(valid, block_size)
    return Prompt(input_ids=input_ids, valid=valid, types=types, blocks=blocks,
                  positions=positions, answer_start=answer_start,
                  first_block=masks.num_prompt_blocks(valid, block_size),
                  vision={"pixel_values": pixels, "image_grid_thw": grid,
                          "mm_token_type_ids": mm},
                  block_size=block_size)
