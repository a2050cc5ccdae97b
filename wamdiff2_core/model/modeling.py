"""The Wamdiff2 model: transformers' Qwen3-VL with block-causal inputs, plus its processor.

``Wamdiff2Model`` owns a ``Qwen3VLForConditionalGeneration``, the processor and the diffusion
fields. It exposes the few forwards the decoders and trainers need, each taking an explicit
4-D boolean mask and explicit (3, B, L) M-RoPE positions (required with a custom 4-D mask).
Checkpoints are Hugging Face directories: config.json (+ ``wamdiff2`` fields), safetensors
weights (one file or shards), tokenizer and processor files; ours, a plain Qwen3-VL one or the
reference repository's ``model_type: wam_diff2`` one. Loading checks the directory before a
weight is allocated (``checkpoint.inspect_checkpoint``, ``checkpoint.check_tensors``) and
every loaded floating tensor for NaN and infinity (``check_finite``, before any warm-up), takes
each diffusion field from the first source that gives it (``fields.resolve_fields``) and the
image preprocessing from the checkpoint's files (``preprocess.read_processor_config``);
``describe()`` says where each came from. Pickle weights are refused.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from transformers.cache_utils import DynamicCache

from wamdiff2_core.model import tokenizer as toks
from wamdiff2_core.model.checkpoint import (CheckpointError, CheckpointFiles,
                                            check_tensors, inspect_checkpoint, name_list)
from wamdiff2_core.model.config import (DiffusionFields, build_config, paradigm_block_size,
                                        set_fields)
from wamdiff2_core.model.fields import (FIELD_NAMES, ResolvedFields, check_overrides,
                                        is_qwen_vocabulary, resolve_fields)
from wamdiff2_core.model.presets import get_preset
from wamdiff2_core.model.preprocess import (ProcessorConfig, check_vision_shape,
                                            read_processor_config)
from wamdiff2_core.model.processor import Wamdiff2Processor, load_tokenizer

__all__ = ["CheckpointError", "Wamdiff2Model", "new_cache"]
log = logging.getLogger("wamdiff2.model")
# The reference format's config names its sub-configs after itself; the shapes are Qwen3-VL's.
_MODEL_TYPES = {"": "qwen3_vl", "text_config": "qwen3_vl_text",
                "vision_config": "qwen3_vl_vision"}


class Wamdiff2Model(torch.nn.Module):
    def __init__(self, hf: Qwen3VLForConditionalGeneration, processor: Wamdiff2Processor,
                 fields: DiffusionFields, sources: Mapping[str, str] | None = None,
                 origin: str = ""):
        super().__init__()
        self.hf = hf
        self.processor = processor
        self.fields = fields
        self.sources = dict(sources or {k: "given" for k in FIELD_NAMES})
        self.origin = origin

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
        pcfg = ProcessorConfig(max_pixels=max_pixels or preset.max_pixels,
                               min_pixels=preset.min_pixels, image_mean=preset.image_mean,
                               image_std=preset.image_std)
        processor = Wamdiff2Processor(tok, pcfg, config_source=f"preset {name}")
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
        return cls(hf.eval(), processor, fields, {k: f"preset {name}" for k in FIELD_NAMES},
                   f"preset {name}")

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype | None = None,
                        fields: Mapping[str, Any] | DiffusionFields | None = None
                        ) -> "Wamdiff2Model":
        """Load a checkpoint directory: ours, a plain Hugging Face Qwen3-VL one, or the
        reference repository's format.

        ``fields`` overrides diffusion fields by name (``{"mask_token_id": 151671}``; a whole
        ``DiffusionFields`` overrides every one); the others come from the checkpoint
        (``fields.resolve_fields``). The directory is checked before a weight is
        allocated; every problem is one CheckpointError sentence."""
        path = Path(path)
        files = inspect_checkpoint(path)
        overrides = _as_overrides(fields)
        tok = load_tokenizer(path)
        resolved = resolve_fields(files.config, tok, overrides, where=str(path))
        processor = _processor(files, tok, resolved)
        cfg = _hf_config(files)
        _check_ids(cfg, processor, path)
        check_tensors(files, *expected_tensors(cfg))
        try:
            hf, info = Qwen3VLForConditionalGeneration.from_pretrained(
                str(path), config=cfg, attn_implementation="sdpa",
                dtype=dtype or torch.float32, use_safetensors=True, output_loading_info=True,
                local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise CheckpointError(f"cannot load checkpoint {path}: {exc}") from exc
        bad = {k: v for k, v in info.items() if v and k != "error_msgs"}
        if bad or info.get("error_msgs"):
            raise CheckpointError(f"cannot load checkpoint {path}: transformers reported "
                                  f"{bad or info['error_msgs']}")
        check_finite(hf.state_dict().items(), path)
        model = cls(hf.to(device).eval(), processor, resolved.fields, resolved.sources,
                    str(path))
        log.info(model.describe())
        return model

    def save_pretrained(self, path: str | Path) -> None:
        """Write config, safetensors weights, tokenizer and processor to ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        set_fields(self.hf.config, self.fields)
        self.hf.save_pretrained(str(path), safe_serialization=True)
        self.processor.save_pretrained(path)

    def with_fields(self, source: str = "with_fields", **kw) -> "Wamdiff2Model":
        """The same weights with changed diffusion fields (e.g. the next block size);
        ``source`` names who changed them (``describe()``)."""
        fields = self.fields.with_(**kw)
        processor = self.processor.with_ids(fields.eoa_token_id, fields.pad_token_id,
                                            fields.mask_token_id)
        sources = {**self.sources, **{k: source for k in kw if k in FIELD_NAMES}}
        return type(self)(self.hf, processor, fields, sources, self.origin)

    def describe(self) -> str:
        """Where this model came from and where each diffusion field and the image
        preprocessing were taken from (what was read, what was assumed)."""
        f = self.fields
        field_text = ", ".join(f"{k}={getattr(f, k)} ({self.sources.get(k, '?')})"
                               for k in FIELD_NAMES)
        p = self.processor
        prompt = "its chat template" if p.use_chat_template else "the built-in Qwen chat format"
        return (f"{self.origin or 'model'}: {self.num_parameters() / 1e6:.1f}M parameters; "
                f"fields: {field_text}; images: {p.config.describe()} ({p.config_source}); "
                f"prompts: {prompt}, cameras {', '.join(f.cameras)}"
                + ("" if f.lateral_status else
                   "; plans: the lateral velocity and acceleration written as 0.00")
                + ("; predictions shifted (position i - 1 predicts token i)"
                   if f.shift and f.paradigm == "diffusion" else "")
                + (f"; answers decoded with {f.decode_commit_rule}"
                   + (f", threshold {f.decode_threshold:g}" if f.decode_threshold else "")
                   + " unless the caller chooses a rule" if f.decode_commit_rule else ""))

    def with_max_pixels(self, max_pixels: int, min_pixels: int | None = None
                        ) -> "Wamdiff2Model":
        """The same weights with another image budget (pixels after resizing): at most
        ``max_pixels`` and, when given, at least ``min_pixels`` (a smaller frame is scaled
        up to it, so it covers more visual tokens)."""
        p = self.processor
        low = p.config.min_pixels if min_pixels is None else min_pixels
        config = dataclasses.replace(p.config, max_pixels=max_pixels, min_pixels=low)
        note = f"max_pixels {max_pixels}" + ("" if min_pixels is None
                                              else f", min_pixels {min_pixels}")
        processor = type(p)(p.tokenizer, config, p.eoa_id, p.pad_id, p.mask_id,
                            p.use_chat_template, f"{p.config_source}; {note}")
        return type(self)(self.hf, processor, self.fields, self.sources, self.origin)

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


def check_finite(tensors: Iterable[tuple[str, torch.Tensor]], where: str | Path) -> None:
    """CheckpointError naming the floating tensors that hold a NaN or an infinity (poisoned
    weights would otherwise plan silently). One pass: a tensor whose sum is finite holds
    only finite values (a NaN or infinity makes any sum non-finite); only the rare tensor
    whose sum is not (an overflow) is looked at element by element."""
    bad = []
    for name, tensor in tensors:
        if tensor.is_floating_point() and not torch.isfinite(tensor.sum()) \
                and not torch.isfinite(tensor).all():
            bad.append(name)
    if bad:
        raise CheckpointError(f"checkpoint {where} holds non-finite weights (NaN or infinity) "
                              f"in {len(bad)} tensor(s): {name_list(bad)}")


def new_cache(model: Wamdiff2Model) -> DynamicCache:
    return DynamicCache(config=model.hf.config.get_text_config())


def _as_overrides(fields) -> dict[str, Any]:
    if isinstance(fields, DiffusionFields):
        return {k: getattr(fields, k) for k in FIELD_NAMES}
    return check_overrides(fields)


def _processor(files: CheckpointFiles, tok, resolved: ResolvedFields) -> Wamdiff2Processor:
    """The checkpoint's processor: its image preprocessing files, its tokenizer with the
    resolved special ids, its chat template when the vocabulary is Qwen's."""
    pcfg, source = read_processor_config(files.path)
    check_vision_shape(pcfg, files.config["vision_config"], str(files.path))
    if files.config.get("wamdiff2") is not None and not source.startswith("wamdiff2"):
        log.warning("%s has a wamdiff2 section but no wamdiff2_processor.json: its images are "
                    "preprocessed as %s says", files.path, source)
    f = resolved.fields
    qwen = is_qwen_vocabulary(tok, int(files.config["text_config"]["vocab_size"]))
    return Wamdiff2Processor(tok, pcfg, eoa_id=f.eoa_token_id, pad_id=f.pad_token_id,
                             mask_id=f.mask_token_id, use_chat_template=qwen,
                             config_source=source)


def _hf_config(files: CheckpointFiles) -> Qwen3VLConfig:
    """transformers' Qwen3-VL config of a checkpoint's config.json (the reference format's
    ``wam_diff2`` model types read as the Qwen3-VL ones they are)."""
    raw = dict(files.config)
    for key in ("architectures", "auto_map", "transformers_version"):
        raw.pop(key, None)
    raw["model_type"] = _MODEL_TYPES[""]
    for sub in ("text_config", "vision_config"):
        raw[sub] = dict(raw[sub], model_type=_MODEL_TYPES[sub])
    try:
        cfg = Qwen3VLConfig.from_dict(raw)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{files.path}/config.json is not a valid Qwen3-VL config: "
                              f"{exc}") from None
    cfg._attn_implementation = "sdpa"
    return cfg


def _check_ids(cfg: Qwen3VLConfig, processor: Wamdiff2Processor, path: Path) -> None:
    """The config's image/vision token ids are the tokenizer's."""
    pairs = (("image_token_id", processor.image_pad_id, toks.IMAGE_PAD),
             ("vision_start_token_id", processor.vision_start_id, toks.VISION_START),
             ("vision_end_token_id", processor.vision_end_id, toks.VISION_END))
    for key, tok_id, token in pairs:
        if getattr(cfg, key) != tok_id:
            raise CheckpointError(f"{path}: config.json's {key} {getattr(cfg, key)} is not "
                                  f"the tokenizer's {token} id {tok_id}")


def expected_tensors(cfg: Qwen3VLConfig) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Name -> shape of every tensor a checkpoint of ``cfg`` holds, and the names that may be
    absent (weights tied to another), from a model built on the meta device (no memory)."""
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(cfg)
    unique = {n for n, _ in model.named_parameters()}
    every = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    return shapes, (every - unique) & set(shapes)
