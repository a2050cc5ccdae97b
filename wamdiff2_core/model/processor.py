"""Prompt and image processing without torchvision or a hub.

Turns (prompt text with ``<image>`` placeholders, images) into Qwen3-VL model inputs: the
chat-formatted token ids with one ``<|image_pad|>`` per merged vision patch, the pixel patches
and grids from the PIL image processor, and the token-type ids M-RoPE needs. The chat format
follows Qwen3-VL's template as the reference repository's data code renders it: text pieces
around each image are stripped, the assistant turn opens with ``<|im_start|>assistant\\n``
and the answer ends with ``<|im_end|>``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)

from wamdiff2_core.model import tokenizer as toks

IMAGE_PLACEHOLDER = "<image>"
PROCESSOR_FILE = "wamdiff2_processor.json"


@dataclass(frozen=True)
class ProcessorConfig:
    max_pixels: int
    min_pixels: int = 32 * 32
    patch_size: int = 16
    merge_size: int = 2
    temporal_patch_size: int = 2


def to_pil(image) -> Image.Image:
    """A PIL RGB image from a PIL image or an (H, W, 3) uint8 array."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got {arr.shape} {arr.dtype}")
    return Image.fromarray(arr, "RGB")


class Wamdiff2Processor:
    """Tokenizer + image processor + chat format for one checkpoint."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, config: ProcessorConfig):
        self.tokenizer = tokenizer
        self.config = config
        self.image_processor = Qwen2VLImageProcessorPil(
            patch_size=config.patch_size, merge_size=config.merge_size,
            temporal_patch_size=config.temporal_patch_size,
            size={"shortest_edge": config.min_pixels, "longest_edge": config.max_pixels})
        ids = tokenizer.convert_tokens_to_ids
        self.mask_id = ids(toks.MASK)
        self.eoa_id = ids(toks.IM_END)
        self.pad_id = ids(toks.ENDOFTEXT)
        self.image_pad_id = ids(toks.IMAGE_PAD)
        self.vision_start_id = ids(toks.VISION_START)
        self.vision_end_id = ids(toks.VISION_END)
        self._assistant_ids = tokenizer.encode(f"{toks.IM_START}assistant\n",
                                               add_special_tokens=False)

    # ------------------------------------------------------------------ text
    def chat_text(self, prompt: str, n_image_tokens: list[int]) -> str:
        """The user turn and the opened assistant turn, with image pads expanded."""
        parts = prompt.split(IMAGE_PLACEHOLDER)
        if len(parts) - 1 != len(n_image_tokens):
            raise ValueError(f"prompt has {len(parts) - 1} {IMAGE_PLACEHOLDER} placeholders "
                             f"but {len(n_image_tokens)} images were given")
        body = ""
        for i, part in enumerate(parts):
            body += part.strip()
            if i < len(n_image_tokens):
                body += toks.VISION_START + toks.IMAGE_PAD * n_image_tokens[i] + toks.VISION_END
        return f"{toks.IM_START}user\n{body}{toks.IM_END}\n{toks.IM_START}assistant\n"

    def encode_answer(self, answer: str, block_size: int, min_blocks: int = 1) -> list[int]:
        """Answer ids + end-of-answer, padded with end-of-answer to whole blocks."""
        ids = self.tokenizer.encode(answer, add_special_tokens=False) + [self.eoa_id]
        n = max(min_blocks, -(-len(ids) // block_size)) * block_size
        return ids + [self.eoa_id] * (n - len(ids))

    def decode_answer(self, ids) -> str:
        """Text of the answer ids up to (not including) the first end-of-answer."""
        ids = [int(i) for i in ids]
        if self.eoa_id in ids:
            ids = ids[:ids.index(self.eoa_id)]
        ids = [i for i in ids if i != self.mask_id]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ---------------------------------------------------------------- images
    def process_images(self, images: list) -> dict:
        if not images:
            return {}
        out = self.image_processor(images=[to_pil(im) for im in images], return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def _image_tokens(self, grid_thw: torch.Tensor) -> list[int]:
        merge = self.config.merge_size ** 2
        return [int(g.prod()) // merge for g in grid_thw]

    # ---------------------------------------------------------------- batches
    def encode_prompts(self, prompts: list[str], images: list[list]) -> dict:
        """A left-padded prompt batch.

        Returns input_ids (B, P), valid (B, P) bool, mm_token_type_ids (B, P), and
        pixel_values / image_grid_thw for all images in row order.
        """
        if len(prompts) != len(images):
            raise ValueError("one image list per prompt is needed")
        rows, vis = [], self.process_images([im for row in images for im in row])
        grids = vis.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long))
        n_tokens, k = self._image_tokens(grids), 0
        for prompt, row in zip(prompts, images):
            text = self.chat_text(prompt, n_tokens[k:k + len(row)])
            k += len(row)
            rows.append(self.tokenizer.encode(text, add_special_tokens=False))
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r):] = torch.tensor(r)
            valid[i, width - len(r):] = True
        mm = (input_ids == self.image_pad_id).long() * valid.long()
        return {"input_ids": input_ids, "valid": valid, "mm_token_type_ids": mm, **vis}

    # ------------------------------------------------------------ save / load
    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        self.tokenizer.save_pretrained(str(path))
        (path / PROCESSOR_FILE).write_text(json.dumps(asdict(self.config), indent=2))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "Wamdiff2Processor":
        path = Path(path)
        tok = PreTrainedTokenizerFast.from_pretrained(str(path))
        cfg_file = path / PROCESSOR_FILE
        if cfg_file.exists():
            cfg = ProcessorConfig(**json.loads(cfg_file.read_text()))
        else:  # a plain Qwen3-VL checkpoint: its preprocessor budget
            pre = path / "preprocessor_config.json"
            d = json.loads(pre.read_text()) if pre.exists() else {}
            size = d.get("size", {})
            cfg = ProcessorConfig(max_pixels=size.get("longest_edge", 1280 * 720),
                                  min_pixels=size.get("shortest_edge", 32 * 32),
                                  patch_size=d.get("patch_size", 16),
                                  merge_size=d.get("merge_size", 2),
                                  temporal_patch_size=d.get("temporal_patch_size", 2))
        return cls(tok, cfg)
