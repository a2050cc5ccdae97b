"""How a checkpoint's images are preprocessed: the image processor's settings and where they
come from.

``ProcessorConfig`` holds every setting of transformers' PIL Qwen2-VL image processor that
changes pixel values or the number of image tokens: resize budget (min/max pixels), patch,
merge and temporal patch sizes, rescale factor, normalisation mean and std, resampling filter.
``read_processor_config`` finds them in a checkpoint, in this order:

1. ``wamdiff2_processor.json``: what this project writes (every field explicit). Files
   written before the normalisation was stored lack ``image_mean``/``image_std``: those
   checkpoints were trained with transformers' defaults (the CLIP values), which is what
   they get, and the description says so.
2. ``preprocessor_config.json``: a Hugging Face Qwen3-VL / WAM-Diff2 checkpoint's own file
   (``size.shortest_edge/longest_edge`` or ``min_pixels/max_pixels``, ``image_mean``, ...).
   Keys it does not state take transformers' class defaults, as transformers would.

A checkpoint with neither file is refused: its images would be preprocessed by a guess.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)

from wamdiff2_core.model.checkpoint import CheckpointError

PROCESSOR_FILE = "wamdiff2_processor.json"
HF_PREPROCESSOR_FILE = "preprocessor_config.json"
CLIP_MEAN, CLIP_STD = tuple(OPENAI_CLIP_MEAN), tuple(OPENAI_CLIP_STD)
QWEN3_VL_MEAN = QWEN3_VL_STD = (0.5, 0.5, 0.5)
BICUBIC = 3                      # PIL.Image.Resampling.BICUBIC, the Qwen2-VL processor's own


@dataclass(frozen=True)
class ProcessorConfig:
    """Image preprocessing settings (defaults: transformers' Qwen2-VL processor's, with this
    project's 16-pixel patches)."""
    max_pixels: int
    min_pixels: int = 32 * 32
    patch_size: int = 16
    merge_size: int = 2
    temporal_patch_size: int = 2
    image_mean: tuple[float, ...] = CLIP_MEAN
    image_std: tuple[float, ...] = CLIP_STD
    rescale_factor: float = 1 / 255
    do_rescale: bool = True
    do_normalize: bool = True
    do_convert_rgb: bool = True
    resample: int = BICUBIC

    def __post_init__(self):
        object.__setattr__(self, "image_mean", tuple(float(v) for v in self.image_mean))
        object.__setattr__(self, "image_std", tuple(float(v) for v in self.image_std))
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and "
                             f"{self.max_pixels}")
        for name in ("patch_size", "merge_size", "temporal_patch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or 0 in self.image_std:
            raise ValueError(f"image_mean and image_std must be 3 values (std non-zero), got "
                             f"{list(self.image_mean)} and {list(self.image_std)}")

    def image_processor(self) -> Qwen2VLImageProcessorPil:
        """transformers' PIL Qwen2-VL image processor with exactly these settings."""
        return Qwen2VLImageProcessorPil(
            patch_size=self.patch_size, merge_size=self.merge_size,
            temporal_patch_size=self.temporal_patch_size,
            size={"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels},
            image_mean=list(self.image_mean), image_std=list(self.image_std),
            rescale_factor=self.rescale_factor, do_rescale=self.do_rescale,
            do_normalize=self.do_normalize, do_convert_rgb=self.do_convert_rgb,
            resample=self.resample)

    def to_json(self) -> str:
        d = asdict(self)
        d["image_mean"], d["image_std"] = list(self.image_mean), list(self.image_std)
        return json.dumps(d, indent=2)

    def describe(self) -> str:
        mean = ", ".join(f"{v:.4g}" for v in self.image_mean)
        std = ", ".join(f"{v:.4g}" for v in self.image_std)
        return (f"mean ({mean}), std ({std}), pixels {self.min_pixels}..{self.max_pixels}, "
                f"patch {self.patch_size}, merge {self.merge_size}")


_KEYS = {f.name for f in fields(ProcessorConfig)}


def read_processor_config(path: Path) -> tuple[ProcessorConfig, str]:
    """The image preprocessing of checkpoint ``path`` and a description of where it came
    from; CheckpointError when neither file exists or one is malformed."""
    ours, theirs = path / PROCESSOR_FILE, path / HF_PREPROCESSOR_FILE
    if ours.exists():
        data = _json_object(ours)
        unknown = set(data) - _KEYS
        if unknown:
            raise CheckpointError(f"{ours} has unknown keys {sorted(unknown)}; known: "
                                  f"{sorted(_KEYS)}")
        source = PROCESSOR_FILE
        if "image_mean" not in data and "image_std" not in data:
            source += (" (it states no normalisation: transformers' CLIP defaults, which "
                       "checkpoints written before the file stored it were trained with)")
        return _build(ours, data), source
    if theirs.exists():
        return _build(theirs, _from_hf(_json_object(theirs))), HF_PREPROCESSOR_FILE
    raise CheckpointError(f"{path} has neither {PROCESSOR_FILE} nor {HF_PREPROCESSOR_FILE}, so "
                          f"how its images are normalised and resized is unknown: copy the "
                          f"file from the checkpoint it was trained from")


def _from_hf(d: dict) -> dict:
    """ProcessorConfig keywords from a Hugging Face preprocessor_config.json (absent keys:
    transformers' class defaults, as transformers itself would use)."""
    cls = Qwen2VLImageProcessorPil
    size = d.get("size") if isinstance(d.get("size"), dict) else {}
    out = {
        "min_pixels": d.get("min_pixels", size.get("shortest_edge", cls.size["shortest_edge"])),
        "max_pixels": d.get("max_pixels", size.get("longest_edge", cls.size["longest_edge"])),
        "patch_size": d.get("patch_size", cls.patch_size),
        "merge_size": d.get("merge_size", cls.merge_size),
        "temporal_patch_size": d.get("temporal_patch_size", cls.temporal_patch_size),
        "image_mean": d.get("image_mean", cls.image_mean),
        "image_std": d.get("image_std", cls.image_std),
        "rescale_factor": d.get("rescale_factor", 1 / 255),
        "do_rescale": d.get("do_rescale", cls.do_rescale),
        "do_normalize": d.get("do_normalize", cls.do_normalize),
        "do_convert_rgb": d.get("do_convert_rgb", cls.do_convert_rgb),
        "resample": d.get("resample", int(cls.resample)),
    }
    for key in ("image_mean", "image_std"):
        if isinstance(out[key], (int, float)):
            out[key] = [out[key]] * 3
    return out


def _build(file: Path, data: dict) -> ProcessorConfig:
    try:
        return ProcessorConfig(**data)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{file} is not a valid image processor config: {exc}") from None


def _json_object(file: Path) -> dict:
    from wamdiff2_core.user_files import read_json

    try:
        data = read_json(file, "processor config")
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object, got {type(data).__name__}")
    return data


def check_vision_shape(cfg: ProcessorConfig, vision: dict, where: str) -> None:
    """CheckpointError unless the processor's patch, merge and temporal sizes are the vision
    tower's (``vision_config`` of config.json)."""
    pairs = (("patch_size", "patch_size", 16), ("merge_size", "spatial_merge_size", 2),
             ("temporal_patch_size", "temporal_patch_size", 2))
    for ours, theirs, default in pairs:
        if getattr(cfg, ours) != vision.get(theirs, default):
            raise CheckpointError(f"{where}: the image processor's {ours} "
                                  f"{getattr(cfg, ours)} is not the vision tower's {theirs} "
                                  f"{vision.get(theirs, default)}")
