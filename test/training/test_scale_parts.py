"""The parts of training at scale that one process shows: activation checkpointing changes
no loss or gradient, `wamdiff2 export` gives the planner the trainer's weights, a checkpoint
of another model shape is refused, the memory plan's formulas match what autograd keeps."""
from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest
import torch
from conftest import tiny_overrides
from refusals import assert_one_sentence

from wamdiff2_core.apps.cli import main
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import Planner, PlannerConfig
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.config import build_recipe
from wamdiff2_core.training.engine import Trainer
from wamdiff2_core.training.memory import text_layer_bytes, vision_block_bytes


def _trainer(toy_data, out, *extra) -> Trainer:
    return Trainer(build_recipe({}, tiny_overrides(toy_data, out) + [
        "data.limit=8", "train.global_batch=4", "train.micro_batch=2", *extra]),
        log=lambda *a: None)


def test_activation_checkpointing_changes_no_loss_or_gradient(toy_data, tmp_path):
    runs = []
    for ac in ("false", "true"):
        trainer = _trainer(toy_data, tmp_path / ac, f"train.activation_checkpointing={ac}",
                           "optim.grad_clip=0")
        values = trainer.train_step(0)
        grads = {n: p.grad.clone() for n, p in trainer.model.hf.named_parameters()}
        runs.append((values, grads))
    (a, ga), (b, gb) = runs
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-6)
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], abs=1e-6)
    gap = max((ga[n] - gb[n]).abs().max().item() for n in ga)
    assert gap < 1e-6
    print(f"\nactivation checkpointing on vs off: |loss difference| "
          f"{abs(a['loss'] - b['loss']):.1e}, max |gradient difference| {gap:.1e}")


def test_export_decodes_the_trainers_tokens(toy_data, tmp_path, capsys):
    trainer = _trainer(toy_data, tmp_path / "run")
    trainer.train_step(0)
    saved = trainer.save_checkpoint(1)
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0     # the newest checkpoint
    assert str(out) in capsys.readouterr().out
    decode = DecodeConfig(constrained=False, max_new_tokens=16)
    images = [[np.asarray(np.random.default_rng(k).integers(0, 255, (90, 160, 3)), np.uint8)]
              for k in range(2)]
    prompts = [trainer.batches.samples[k].prompt for k in range(2)]
    trainer.model.hf.eval()
    want, _ = Planner(trainer.model, PlannerConfig(decode)).generate(prompts, images)
    got, _ = Planner.from_pretrained(out, PlannerConfig(decode)).generate(prompts, images)
    assert got == want
    # a damaged shard: one sentence, nothing written
    shard = sorted((saved / ckpt.SHARDS_DIR).glob("*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:64])
    code = main(["export", str(saved), str(tmp_path / "other")])
    assert_one_sentence(code, capsys.readouterr().err, "cannot export", "bytes")
    assert not (tmp_path / "other").exists()
    code = main(["export", str(tmp_path / "run"), str(out)])              # not over a model
    assert_one_sentence(code, capsys.readouterr().err, "already exists")


def test_a_checkpoint_of_another_model_shape_is_refused(toy_data, tmp_path, capsys):
    init = tmp_path / "init"
    Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4).save_pretrained(init)
    run = tmp_path / "run"
    argv = ["train", "--config", "block4.yaml", *tiny_overrides(toy_data, run, init=str(init)),
            "train.steps=1", "data.limit=4"]
    assert main(argv) == 0
    shutil.rmtree(init)          # the same path now holds a model of another shape
    Wamdiff2Model.from_preset("small", paradigm="diffusion", block_size=4).save_pretrained(init)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and "tb" not in p.parts}
    capsys.readouterr()
    code = main(argv[:3] + ["--resume"] + argv[3:])
    assert_one_sentence(code, capsys.readouterr().err, "was written for another model shape")
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and "tb" not in p.parts}
    assert after == before                                     # nothing written over


def _saved_bytes(fn, params) -> int:
    """Bytes of the tensors autograd keeps for ``fn``'s backward (parameters excluded)."""
    seen: dict[int, int] = {}
    skip = {p.untyped_storage().data_ptr() for p in params}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_formulas_match_what_autograd_keeps(dtype):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import (Qwen3VLTextDecoderLayer,
                                                                 Qwen3VLVisionBlock)

    cfg = Wamdiff2Model.from_preset("tiny", device="meta").hf.config
    c = torch.finfo(dtype).bits // 8
    t = copy.deepcopy(cfg.text_config)           # every width distinct
    t.hidden_size, t.num_attention_heads, t.num_key_value_heads = 256, 6, 2
    t.head_dim, t.intermediate_size, t._attn_implementation = 40, 700, "sdpa"
    layer = Qwen3VLTextDecoderLayer(t, 0).to(dtype).train()
    batch, length = 2, 48
    x = torch.randn(batch, length, 256, dtype=dtype, requires_grad=True)
    mask = torch.ones(batch, 1, length, length, dtype=torch.bool).tril()
    cos, sin = (torch.randn(batch, length, 40, dtype=dtype) for _ in range(2))
    got = _saved_bytes(lambda: layer(x, attention_mask=mask, position_embeddings=(cos, sin)),
                       [*layer.parameters(), cos, sin])
    dims = dict(hidden=256, heads=6, kv_heads=2, head_dim=40, intermediate=700)
    assert got == batch * text_layer_bytes(dims, length, c)
    v = copy.deepcopy(cfg.vision_config)
    v.hidden_size, v.num_heads, v.intermediate_size, v._attn_implementation = 96, 2, 200, "sdpa"
    block = Qwen3VLVisionBlock(v).to(dtype).train()
    patches = torch.randn(64, 96, dtype=dtype, requires_grad=True)
    emb = torch.randn(64, 48)                    # fp32, as the model's rotary buffers are
    pe = (emb.cos(), emb.sin())
    cu = torch.tensor([0, 32, 64], dtype=torch.int32)
    got = _saved_bytes(lambda: block(patches, cu_seqlens=cu, position_embeddings=pe),
                       [*block.parameters(), *pe])
    assert got == vision_block_bytes(dict(hidden=96, heads=2, intermediate=200), 64, c)


def test_memory_plan_command_counts_the_shards(capsys):
    assert main(["memory-plan", "--config", "block4.yaml", "--model", "tiny", "--gpus", "2",
                 "--cpu", "--strategy", "fsdp", "--json", "train.precision=fp32"]) == 0
    import json

    plan = json.loads(capsys.readouterr().out)
    model = Wamdiff2Model.from_preset("tiny", device="meta").hf
    rows = [(p.shape[0] + 1) // 2 * p[0].numel() for p in model.parameters()]
    assert plan["items"]["parameters"] == 4 * sum(rows)
    assert plan["items"]["optimizer"] == 2 * plan["items"]["parameters"] + 4 * len(rows)
    assert plan["fits"]["no_checkpointing"]
