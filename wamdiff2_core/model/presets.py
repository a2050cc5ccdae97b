"""Named model shapes: tiny and small for CPU work, and the real Qwen3-VL 2B / 8B shapes.

A preset fixes the Qwen3-VL text and vision shapes, the tokenizer family and the image budget.
The diffusion fields (block size, mask token, end-of-answer token) are added by
``wamdiff2_core.model.config``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Preset:
    """One model shape. ``tokenizer`` is "tiny-bpe" (trained by this project) or "qwen"."""
    name: str
    tokenizer: str
    text: dict
    vision: dict
    max_pixels: int          # image processor budget (pixels after resizing)
    min_pixels: int = 32 * 32
    tie_word_embeddings: bool = False
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _mrope(head_dim: int) -> dict:
    """Interleaved M-RoPE sections (t, h, w) that sum to head_dim / 2, Qwen3-VL style."""
    half = head_dim // 2
    h = w = half * 5 // 16
    return {"rope_type": "default", "rope_theta": 1_000_000.0,
            "mrope_section": [half - h - w, h, w], "mrope_interleaved": True}


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny", tokenizer="tiny-bpe",
        text=dict(hidden_size=192, num_hidden_layers=6, num_attention_heads=6,
                  num_key_value_heads=2, head_dim=32, intermediate_size=512,
                  max_position_embeddings=4096, rope_parameters=_mrope(32)),
        vision=dict(depth=2, hidden_size=96, num_heads=2, intermediate_size=256,
                    out_hidden_size=192, deepstack_visual_indexes=[0],
                    num_position_embeddings=256),
        max_pixels=256 * 144, notes="~3.4M parameters; CI, the bundled default"),
    "small": Preset(
        name="small", tokenizer="tiny-bpe",
        text=dict(hidden_size=320, num_hidden_layers=10, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=40, intermediate_size=1024,
                  max_position_embeddings=4096, rope_parameters=_mrope(40)),
        vision=dict(depth=4, hidden_size=128, num_heads=4, intermediate_size=512,
                    out_hidden_size=320, deepstack_visual_indexes=[1, 3],
                    num_position_embeddings=256),
        max_pixels=256 * 144, notes="~15.6M parameters; cross-scale distillation teacher"),
    "qwen3-vl-2b": Preset(
        name="qwen3-vl-2b", tokenizer="qwen",
        text=dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, intermediate_size=6144,
                  max_position_embeddings=262144, vocab_size=151936,
                  rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                   "mrope_section": [24, 20, 20], "mrope_interleaved": True}),
        vision=dict(depth=24, hidden_size=1024, num_heads=16, intermediate_size=4096,
                    out_hidden_size=2048, deepstack_visual_indexes=[5, 11, 17],
                    num_position_embeddings=2304),
        max_pixels=1280 * 720, tie_word_embeddings=True, notes="Qwen3-VL-2B shape"),
    "qwen3-vl-8b": Preset(
        name="qwen3-vl-8b", tokenizer="qwen",
        text=dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=128, intermediate_size=12288,
                  max_position_embeddings=262144, vocab_size=151936,
                  rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                   "mrope_section": [24, 20, 20], "mrope_interleaved": True}),
        vision=dict(depth=27, hidden_size=1152, num_heads=16, intermediate_size=4304,
                    out_hidden_size=4096, deepstack_visual_indexes=[8, 16, 24],
                    num_position_embeddings=2304),
        max_pixels=1280 * 720, tie_word_embeddings=False, notes="Qwen3-VL-8B shape"),
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; a ValueError listing the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known presets: "
                         f"{', '.join(sorted(PRESETS))}") from None


def is_preset(name: str) -> bool:
    """Whether a model source names a preset rather than a checkpoint: a string that is a
    directory is a checkpoint; otherwise a preset name is a preset (docs/INTERFACES.md)."""
    return name in PRESETS and not Path(name).is_dir()
