"""Qwen3-VL configuration plus the diffusion fields.

The diffusion fields live in the Hugging Face ``config.json`` under the key ``wamdiff2`` so a
checkpoint directory is still a valid Qwen3-VL checkpoint for any other tool. transformers is
imported only to build a config: reading recipes and fields stays torch-free (fast command-line
errors).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from wamdiff2_core.model.presets import Preset
from wamdiff2_core.tasks.cameras import DEFAULT_CAMERAS, check_cameras

if TYPE_CHECKING:
    from transformers import Qwen3VLConfig

PARADIGMS = ("ar", "diffusion")


@dataclass(frozen=True)
class DiffusionFields:
    """What decoding needs to know beyond the Qwen3-VL shapes.

    paradigm: "ar" for the stage-0 next-token model, "diffusion" for block diffusion.
    block_size: answer block length B (1 for AR).
    lateral_status: whether planning prompts state the ego's lateral velocity and
    acceleration. False for a model trained with them never shown
    (``data.lateral_status_dropout: 1.0``): its planner writes both as 0.00, as in training.
    shift: where a diffusion model's prediction of answer position i is read. False (the
    reference repository's convention): from position i itself. True: from position i - 1,
    as an AR model reads its next token (the first position of a block from the last
    position before it), so a model converted from an AR checkpoint keeps what its output
    head knew (docs/model.md, "Shifted prediction"). AR models ignore it.
    decode_commit_rule, decode_threshold: the commit rule and threshold the checkpoint
    recommends ("" / 0: none; the rule's name is checked where answers are decoded,
    ``decoding.config.resolve_decode``). A decode whose caller chose no rule runs
    with them (docs/decoding.md, "The checkpoint's commit rule").
    cameras: the names of the cameras the model was trained with, in the order of a
    prompt's images (``tasks.scene_prefix``); a checkpoint that names none read the front
    camera alone, as the reference data does.
    """
    paradigm: str
    block_size: int
    mask_token_id: int
    eoa_token_id: int
    pad_token_id: int
    preset: str = ""
    lateral_status: bool = True
    shift: bool = False
    decode_commit_rule: str = ""
    decode_threshold: float = 0.0
    cameras: tuple[str, ...] = DEFAULT_CAMERAS

    def __post_init__(self):
        if self.paradigm not in PARADIGMS:
            raise ValueError(f"paradigm must be one of {PARADIGMS}, got {self.paradigm!r}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        for name in ("lateral_status", "shift"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got "
                                 f"{getattr(self, name)!r}")
        if not isinstance(self.decode_commit_rule, str):
            raise ValueError(f"decode_commit_rule must be a rule's name, got "
                             f"{self.decode_commit_rule!r}")
        t = self.decode_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0:
            raise ValueError(f"decode_threshold must be a number in [0, 1], got {t!r}")
        object.__setattr__(self, "cameras", check_cameras(self.cameras))

    def with_(self, **kw) -> "DiffusionFields":
        return replace(self, **kw)


def paradigm_block_size(paradigm: str, block_size: int) -> int:
    """The answer block length a paradigm decodes with: 1 for "ar" (next-token decoding is
    block diffusion with blocks of one token), ``block_size`` otherwise."""
    return 1 if paradigm == "ar" else block_size


def build_config(preset: Preset, vocab_size: int, special_ids: dict[str, int],
                 fields: DiffusionFields) -> Qwen3VLConfig:
    """A Qwen3-VL config of ``preset``'s shape for a tokenizer of ``vocab_size`` tokens."""
    from transformers import Qwen3VLConfig

    text = dict(preset.text)
    text.setdefault("vocab_size", vocab_size)
    text["vocab_size"] = max(text["vocab_size"], vocab_size)
    text.update(attention_bias=False, hidden_act="silu", rms_norm_eps=1e-6,
                pad_token_id=fields.pad_token_id)
    vision = dict(preset.vision, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                  in_channels=3, hidden_act="gelu_pytorch_tanh")
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision,
                        image_token_id=special_ids["image"], video_token_id=special_ids["video"],
                        vision_start_token_id=special_ids["vision_start"],
                        vision_end_token_id=special_ids["vision_end"],
                        tie_word_embeddings=preset.tie_word_embeddings)
    set_fields(cfg, fields)
    return cfg


def set_fields(cfg: Qwen3VLConfig, fields: DiffusionFields) -> None:
    cfg.wamdiff2 = dict(asdict(fields), cameras=list(fields.cameras))
