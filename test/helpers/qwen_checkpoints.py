"""Checkpoint directories as researchers bring them: random Qwen3-VL models built with
transformers and saved in Hugging Face's own layout, with a real Qwen3-VL vocabulary (no
``<|mask|>``: added tokens end at ``</think>`` 151668), a Qwen3-VL ``preprocessor_config.json``
(mean = std = 0.5) and a chat template; optionally in the reference repository's format
(``model_type: wam_diff2``, its field names, legacy ``rope_scaling``), sharded, or bf16."""
from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

QWEN_VOCAB = 151936
IDS = {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
       "vision_end_token_id": 151653}
# A Qwen3-VL preprocessor_config.json as the Qwen3-VL checkpoints ship it.
PREPROCESSOR = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast",
}
# Qwen3-VL's chat rendering of system / user / assistant turns (string or typed-list content;
# images as vision start + one image pad + vision end), with the generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}"
    "{%- else -%}{%- for c in message.content -%}"
    "{%- if c.type == 'image' or 'image' in c -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in c -%}{{- c.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")


def text_shape(hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, intermediate=128,
               vocab=QWEN_VOCAB) -> dict:
    half = head_dim // 2
    h = w = half * 5 // 16
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
                vocab_size=vocab, max_position_embeddings=8192, rms_norm_eps=1e-6,
                hidden_act="silu", bos_token_id=151643, eos_token_id=151645,
                rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                 "mrope_section": [half - h - w, h, w],
                                 "mrope_interleaved": True})


def vision_shape(out_hidden=64, hidden=32, depth=1) -> dict:
    return dict(depth=depth, hidden_size=hidden, num_heads=2, intermediate_size=2 * hidden,
                out_hidden_size=out_hidden, deepstack_visual_indexes=[0], patch_size=16,
                spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=256,
                hidden_act="gelu_pytorch_tanh", in_channels=3)


@functools.lru_cache(maxsize=1)
def _tokenizer_dir() -> Path:
    """The real Qwen3-VL vocabulary, saved once per test session (building it takes ~4 s)."""
    import tempfile

    from wamdiff2_core.model.tokenizer import qwen_tokenizer

    out = Path(tempfile.mkdtemp(prefix="qwen3vl-tok-"))
    qwen_tokenizer(mask=False).save_pretrained(str(out))
    return out


def write_qwen3_vl(path: Path, *, text: dict | None = None, vision: dict | None = None,
                   seed: int = 0, dtype: torch.dtype = torch.float32,
                   max_shard_size: str | None = None, tie: bool = True) -> Path:
    """A random Qwen3-VL checkpoint in Hugging Face's layout (what a user downloads)."""
    text = text or text_shape()
    vision = vision or vision_shape(out_hidden=text["hidden_size"])
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie, **IDS)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg).to(dtype).eval()
    path.mkdir(parents=True, exist_ok=True)
    kw = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(path), **kw)
    for f in _tokenizer_dir().iterdir():
        shutil.copy(f, path / f.name)
    (path / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    (path / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    return path


def to_reference_format(path: Path, block_size: int = 32) -> Path:
    """Rewrite a Qwen3-VL checkpoint's config.json as the reference repository writes it:
    its model types (tools/update_checkpoint_metadata.py), the legacy rope fields, and the
    reference's diffusion field names (its decoder's ``block_size`` / ``mask_token_id`` /
    ``eos_token_id``)."""
    file = path / "config.json"
    cfg = json.loads(file.read_text())
    cfg["model_type"] = "wam_diff2"
    cfg["architectures"] = ["WAMDiff2ForConditionalGeneration"]
    cfg["vision_config"]["model_type"] = "wam_diff2"
    text = cfg["text_config"]
    text["model_type"] = "wam_diff2_text"
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope.pop("rope_theta")
    text["rope_scaling"] = rope
    cfg.update(block_size=block_size, mask_token_id=151671, eos_token_id=151645)
    file.write_text(json.dumps(cfg, indent=2))
    return path
