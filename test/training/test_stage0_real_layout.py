"""Stage 0 starts from a real-layout checkpoint (issue 14): a random Qwen3-VL saved by
transformers in its own sharded bf16 layout (real Qwen3-VL vocabulary without <|mask|>,
Qwen3-VL preprocessor config) is `model.init` of the shipped stage-0 recipe; it trains a few
steps on the CPU, saves, and the result reloads into the planner with the fields and the
image preprocessing it started from. CI runs it at tiny widths; the 2B model's real widths
(hidden 2048, MLP 6144, 16/8 heads of 128, vision 1024 wide) with two layers each are the
slow variant (WAMDIFF2_SLOW=1; ~10 GB of memory for AdamW's state)."""
import json

import numpy as np
import pytest
import torch
from qwen_checkpoints import text_shape, vision_shape, write_qwen3_vl

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.planner import Observation, Planner, PlannerConfig
from wamdiff2_core.training.config import load_recipe
from wamdiff2_core.training.engine import train

SHAPES = {
    "tiny": (text_shape(), vision_shape(), "8MB"),
    "2b-widths": (text_shape(hidden=2048, layers=2, heads=16, kv_heads=8, head_dim=128,
                             intermediate=6144),
                  vision_shape(out_hidden=2048, hidden=1024, depth=2), "400MB"),
}


@pytest.mark.parametrize("shape", [
    "tiny", pytest.param("2b-widths", marks=pytest.mark.slow)])
def test_stage0_from_a_sharded_qwen3_vl_checkpoint(shape, tmp_path, data_dir):
    text, vision, shard = SHAPES[shape]
    init = write_qwen3_vl(tmp_path / "Qwen3-VL", text=text, vision=vision,
                          dtype=torch.bfloat16, max_shard_size=shard)
    assert (init / "model.safetensors.index.json").exists()
    recipe = load_recipe("config/training/stage0_ar.yaml", [
        f"model.init={init}", f"data.path={data_dir}", "train.steps=2", "train.global_batch=2",
        "train.micro_batch=1", "output.progress=false", "output.save_every=2",
        "optim.warmup_steps=0", f"output.dir={tmp_path / 'stage0'}"])
    logs = []
    final = train(recipe, log=logs.append)
    section = json.loads((final / "config.json").read_text())["wamdiff2"]
    assert section["paradigm"] == "ar" and section["block_size"] == 1
    assert section["mask_token_id"] == 151671 and section["eoa_token_id"] == 151645

    planner = Planner.from_pretrained(
        final, PlannerConfig(DecodeConfig(max_new_tokens=8, constrained=False)))
    model = planner.model
    assert set(model.sources.values()) == {"wamdiff2 section"}
    assert model.processor.config.image_mean == (0.5, 0.5, 0.5)
    assert model.processor.use_chat_template
    assert model.hf.config.text_config.hidden_size == text["hidden_size"]
    from safetensors import safe_open

    index = json.loads((init / "model.safetensors.index.json").read_text())["weight_map"]
    key = "model.language_model.layers.0.mlp.up_proj.weight"
    with safe_open(str(init / index[key]), framework="pt") as f:
        before = f.get_tensor(key).float()
    assert not torch.equal(model.hf.state_dict()[key], before)          # it trained
    image = (np.random.RandomState(0).rand(90, 160, 3) * 255).astype(np.uint8)
    try:
        planner.plan(Observation(images=[image], command="straight", velocity=(3.0, 0.0),
                                 acceleration=(0.0, 0.0)))
    except tasks.AnswerParseError as exc:                  # two training steps: not a driver
        assert exc.raw_text is not None
