"""Where a checkpoint's diffusion fields come from, field by field.

Each field (``DiffusionFields``: paradigm, block size, mask, end-of-answer and pad ids) is
taken from the first source that gives it, in the order of ``SOURCES``:

1. ``override``: the caller's (a Python ``fields={...}`` keyword, a ``--mask-token-id``-style
   flag, a node parameter);
2. ``wamdiff2 section``: the ``wamdiff2`` object this project writes into ``config.json``;
3. ``reference config``: the reference repository's own names in a ``model_type: wam_diff2``
   config (``block_size``, ``mask_token_id``, ``eos_token_id`` as the end of answer,
   ``pad_token_id``; top level first, then ``text_config``);
4. ``Qwen3-VL convention``: what the reference uses for Qwen3-VL when the vocabulary is
   Qwen's (mask 151671, end of answer ``<|im_end|>`` 151645, pad ``<|endoftext|>`` 151643,
   block 32, block diffusion);
5. ``default``: only the paradigm, block diffusion (a checkpoint that names no paradigm).

A field no source gives is a CheckpointError naming the field and the flag that supplies it.
``ResolvedFields.sources`` says, per field, which source it came from.
"""
from __future__ import annotations

from dataclasses import dataclass, fields as dc_fields
from typing import Any, Callable, Mapping

from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.model.config import PARADIGMS, DiffusionFields
from wamdiff2_core.tasks.cameras import DEFAULT_CAMERAS

FIELD_NAMES = ("paradigm", "block_size", "mask_token_id", "eoa_token_id", "pad_token_id")
# Field -> the command-line flag / node parameter that supplies it.
FLAGS = {"paradigm": "--paradigm", "block_size": "--block-size",
         "mask_token_id": "--mask-token-id", "eoa_token_id": "--eoa-token-id",
         "pad_token_id": "--pad-token-id"}
NODE_PARAMS = {"paradigm": "model.paradigm", "block_size": "decode.block_size",
               "mask_token_id": "model.mask_token_id", "eoa_token_id": "model.eoa_token_id",
               "pad_token_id": "model.pad_token_id"}

# The Qwen3-VL ids the reference repository decodes and trains with.
QWEN_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
            "<|image_pad|>": 151655}
QWEN_CONVENTION = {"paradigm": "diffusion", "block_size": 32, "mask_token_id": 151671,
                   "eoa_token_id": 151645, "pad_token_id": 151643}
# The reference format's config names -> our field names.
REFERENCE_NAMES = {"block_size": "block_size", "mask_token_id": "mask_token_id",
                   "eos_token_id": "eoa_token_id", "pad_token_id": "pad_token_id"}
_SECTION_KEYS = {f.name for f in dc_fields(DiffusionFields)}


@dataclass(frozen=True)
class ResolvedFields:
    fields: DiffusionFields
    sources: dict[str, str]            # field -> the source it came from

    def describe(self) -> str:
        return ", ".join(f"{k}={getattr(self.fields, k)} ({self.sources[k]})"
                         for k in FIELD_NAMES)


def check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The override dict with None values dropped; ValueError naming an unknown field or a
    value of the wrong type."""
    out = {}
    for key, value in dict(overrides or {}).items():
        if key not in FIELD_NAMES:
            raise ValueError(f"unknown diffusion field {key!r}; fields: {', '.join(FIELD_NAMES)}")
        if value is None:
            continue
        if key == "paradigm":
            if value not in PARADIGMS:
                raise ValueError(f"paradigm must be one of {PARADIGMS}, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be a non-negative integer, got {value!r}")
        out[key] = value
    return out


def is_qwen_vocabulary(tokenizer, vocab_size: int) -> bool:
    """Whether a tokenizer is Qwen's (its chat and image tokens at Qwen's ids) and the model's
    embedding has a row for the reference's mask id 151671."""
    ids = tokenizer.convert_tokens_to_ids(list(QWEN_IDS))
    return ids == list(QWEN_IDS.values()) and vocab_size > QWEN_CONVENTION["mask_token_id"]


# ------------------------------------------------------------------------------ sources
def _section(config: dict, tokenizer, vocab_size: int) -> dict:
    raw = config.get("wamdiff2")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CheckpointError(f"config.json's wamdiff2 section must be an object, got "
                              f"{type(raw).__name__}")
    unknown = set(raw) - _SECTION_KEYS
    if unknown:
        raise CheckpointError(f"config.json's wamdiff2 section has unknown keys "
                              f"{sorted(unknown)}; known: {sorted(_SECTION_KEYS)}")
    return {k: v for k, v in raw.items() if k in FIELD_NAMES and v is not None}


def _reference(config: dict, tokenizer, vocab_size: int) -> dict:
    if config.get("model_type") != "wam_diff2":
        return {}
    out = {}
    text = config.get("text_config") or {}
    for name, field in REFERENCE_NAMES.items():
        value = config.get(name, text.get(name))
        if isinstance(value, int) and not isinstance(value, bool):
            out[field] = value
    out["paradigm"] = "diffusion"                    # the reference format is block diffusion
    return out


def _qwen(config: dict, tokenizer, vocab_size: int) -> dict:
    return dict(QWEN_CONVENTION) if is_qwen_vocabulary(tokenizer, vocab_size) else {}


def _default(config: dict, tokenizer, vocab_size: int) -> dict:
    return {"paradigm": "diffusion"}


SOURCES: tuple[tuple[str, Callable[[dict, Any, int], dict]], ...] = (
    ("wamdiff2 section", _section),
    ("reference config", _reference),
    ("Qwen3-VL convention", _qwen),
    ("default", _default),
)


def resolve_fields(config: dict, tokenizer, overrides: Mapping[str, Any] | None = None,
                   where: str = "the checkpoint") -> ResolvedFields:
    """The diffusion fields of a checkpoint's ``config`` (config.json as a dict) and
    tokenizer, each from the first source that gives it (module docstring); CheckpointError
    naming a field no source gives, or ids outside the model's vocabulary."""
    vocab_size = int(config["text_config"]["vocab_size"])
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = [("override", check_overrides(overrides))]
    layers += [(name, fn(config, tokenizer, vocab_size)) for name, fn in SOURCES]
    for name, given in layers:
        for key in FIELD_NAMES:
            if key not in values and key in given:
                values[key], sources[key] = given[key], name
    missing = [k for k in FIELD_NAMES if k not in values]
    if missing:
        k = missing[0]
        raise CheckpointError(
            f"{where} does not say its {k} (no wamdiff2 section, no reference-format field, "
            f"and its vocabulary is not Qwen's): pass {FLAGS[k]} (Python: fields={{'{k}': "
            f"...}}; node: {NODE_PARAMS[k]})" + (f"; also missing: {', '.join(missing[1:])}"
                                                 if len(missing) > 1 else ""))
    for key in ("mask_token_id", "eoa_token_id", "pad_token_id"):
        if not 0 <= values[key] < vocab_size:
            raise CheckpointError(f"{where}'s {key} {values[key]} ({sources[key]}) is outside "
                                  f"its vocabulary of {vocab_size} ids")
    if values["mask_token_id"] == values["eoa_token_id"]:
        raise CheckpointError(f"{where}'s mask_token_id and eoa_token_id are both "
                              f"{values['mask_token_id']}")
    section = config.get("wamdiff2") or {}
    lateral, shift = section.get("lateral_status"), section.get("shift")
    try:
        fields = DiffusionFields(**values, preset=section.get("preset") or "",
                                 lateral_status=True if lateral is None else lateral,
                                 shift=False if shift is None else shift,
                                 decode_commit_rule=section.get("decode_commit_rule") or "",
                                 decode_threshold=section.get("decode_threshold") or 0.0,
                                 cameras=section.get("cameras") or DEFAULT_CAMERAS)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}'s diffusion fields are invalid: {exc}") from None
    return ResolvedFields(fields, sources)
