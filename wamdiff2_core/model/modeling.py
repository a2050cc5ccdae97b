"""The Wamdiff2 model: transformers' Qwen3-VL with block-causal inputs, plus its processor.

``Wamdiff2Model`` owns a ``Qwen3VLForConditionalGeneration``, the processor and the diffusion
fields. It exposes the few forwards the decoders and trainers need, each taking an explicit
4-D boolean mask and explicit (3, B, L) M-RoPE positions (required with a custom 4-D mask).
Checkpoints are Hugging Face directories: config.json (+ ``wamdiff2`` fields), safetensors
weights, tokenizer and processor files. Pickle weights are refused.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import Qwen3VLForConditionalGeneration
from transformers.cache_utils import DynamicCache

from wamdiff2_core.model import tokenizer as toks
from wamdiff2_core.model.config import (DiffusionFields, build_config, get_fields,
                                        paradigm_block_size, set_fields)
from wamdiff2_core.model.presets import get_preset
from wamdiff2_core.model.processor import ProcessorConfig, Wamdiff2Processor

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message is one clear sentence."""


class Wamdiff2Model(torch.nn.Module):
    def __init__(self, hf: Qwen3VLForConditionalGeneration, processor: Wamdiff2Processor,
                 fields: DiffusionFields):
        super().__init__()
        self.hf = hf
        self.processor = processor
        self.fields = fields

    # ------------------------------------------------------------ building
    @classmethod
    def from_preset(cls, name: str, paradigm: str = "diffusion", block_size: int = 32,
                    seed: int = 0, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32,
                    max_pixels: int | None = None) -> "Wamdiff2Model":
        """A randomly initialised model of a named shape (``meta`` device builds no weights);
        ``max_pixels`` replaces the preset's image budget."""
        preset = get_preset(name)
        tok = toks.build_tokenizer(preset.tokenizer)
        processor = Wamdiff2Processor(tok, ProcessorConfig(
            max_pixels=max_pixels or preset.max_pixels, min_pixels=preset.min_pixels))
        fields = DiffusionFields(paradigm=paradigm,
                                 block_size=paradigm_block_size(paradigm, block_size),
                                 mask_token_id=processor.mask_id,
                                 eoa_token_id=processor.eoa_id, pad_token_id=processor.pad_id,
                                 preset=name)
        special = {"image": processor.image_pad_id,
                   "video": tok.convert_tokens_to_ids(toks.VIDEO_PAD),
                   "vision_start": processor.vision_start_id,
                   "vision_end": processor.vision_end_id}
        cfg = build_config(preset, len(tok), special, fields)
        cfg._attn_implementation = "sdpa"
        if str(device) == "meta":
            with torch.device("meta"):
                hf = Qwen3VLForConditionalGeneration(cfg)
        else:
            torch.manual_seed(seed)
            # Initialise on the target device: a 2B shape is built in seconds on a GPU, not
            # in fp32 on the host first.
            with torch.device(device):
                hf = Qwen3VLForConditionalGeneration(cfg)
            hf = hf.to(dtype=dtype)
        return cls(hf.eval(), processor, fields)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype | None = None,
                        fields: DiffusionFields | None = None) -> "Wamdiff2Model":
        """Load a checkpoint directory (ours, or any local Hugging Face Qwen3-VL one)."""
        path = Path(path)
        check_checkpoint_dir(path)
        try:
            processor = Wamdiff2Processor.from_pretrained(path)
            hf = Qwen3VLForConditionalGeneration.from_pretrained(
                str(path), attn_implementation="sdpa", dtype=dtype or torch.float32,
                use_safetensors=True)
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
            raise CheckpointError(f"cannot load checkpoint {path}: {exc}") from exc
        default = DiffusionFields(paradigm="diffusion", block_size=32,
                                  mask_token_id=processor.mask_id,
                                  eoa_token_id=processor.eoa_id, pad_token_id=processor.pad_id)
        fields = fields or get_fields(hf.config, default)
        return cls(hf.to(device).eval(), processor, fields)

    def save_pretrained(self, path: str | Path) -> None:
        """Write config, safetensors weights, tokenizer and processor to ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        set_fields(self.hf.config, self.fields)
        self.hf.save_pretrained(str(path), safe_serialization=True)
        self.processor.save_pretrained(path)

    def with_fields(self, **kw) -> "Wamdiff2Model":
        """The same weights with changed diffusion fields (e.g. the next block size)."""
        return type(self)(self.hf, self.processor, self.fields.with_(**kw))

    def with_max_pixels(self, max_pixels: int) -> "Wamdiff2Model":
        """The same weights with another image budget (pixels after resizing)."""
        config = dataclasses.replace(self.processor.config, max_pixels=max_pixels)
        return type(self)(self.hf, Wamdiff2Processor(self.processor.tokenizer, config),
                          self.fields)

    # ------------------------------------------------------------ forwards
    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.hf.parameters())

    def rope_positions(self, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor,
                       valid: torch.Tensor, image_grid_thw: torch.Tensor | None):
        """(3, B, L) M-RoPE positions of a left-padded batch and the (B, 1) text deltas."""
        pos, delta = self.hf.model.get_rope_index(
            input_ids, mm_token_type_ids=mm_token_type_ids, image_grid_thw=image_grid_thw,
            attention_mask=valid.long())
        return pos, delta

    def forward_logits(self, input_ids: torch.Tensor, mask: torch.Tensor,
                       position_ids: torch.Tensor, cache: DynamicCache | None = None,
                       pixel_values: torch.Tensor | None = None,
                       image_grid_thw: torch.Tensor | None = None,
                       mm_token_type_ids: torch.Tensor | None = None,
                       use_cache: bool = False) -> torch.Tensor:
        """Logits (B, L, V) of one forward. With a cache, keys/values of these positions are
        appended to it (callers crop them back when the step must not be kept)."""
        out = self.hf(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                      cache=cache, pixel_values=pixel_values, image_grid_thw=image_grid_thw,
                      mm_token_type_ids=mm_token_type_ids, use_cache=use_cache)
        return out.logits


def new_cache(model: Wamdiff2Model) -> DynamicCache:
    return DynamicCache(config=model.hf.config.get_text_config())


def check_checkpoint_dir(path: Path) -> None:
    """Raise CheckpointError with one clear sentence unless ``path`` holds a loadable
    safetensors checkpoint."""
    if not path.exists():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is not a directory")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} is not a checkpoint: config.json is missing")
    files = [p.name for p in path.iterdir()]
    if not any(f.endswith(".safetensors") for f in files):
        pickles = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
        if pickles:
            raise CheckpointError(
                f"{path} holds only pickle weights ({', '.join(sorted(pickles))}); wamdiff2 "
                f"loads safetensors only (pickle files can run code): convert them first")
        raise CheckpointError(f"{path} has no *.safetensors weights")
