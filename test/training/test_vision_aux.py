"""The vision tower's auxiliary box target (``vision_aux.*``, training/vision_aux.py): the
targets sit where the boxes are, on the token grid the real Qwen3-VL processor lays the
image out on; a run with it trains, resumes exactly, and saves a plain checkpoint."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from conftest import tiny_overrides

from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.config import RecipeError, build_recipe
from wamdiff2_core.training.data import load_samples
from wamdiff2_core.training.engine import train
from wamdiff2_core.training.metrics import read_metrics
from wamdiff2_core.training.validate import validate
from wamdiff2_core.training.vision_aux import VisionAuxHead, box_targets, boxes_by_image


def test_targets_cover_the_box_and_mark_its_centre():
    # a 2 x 4 token grid, 4 x 4 sub-cells each: 8 x 16 sub-cells of 125 x 62.5 grid units
    t = box_targets([(250, 0, 500, 250)], rows=2, cols=4, sub=4)
    assert t.shape == (6, 8, 16)
    cover = t[0].nonzero().tolist()
    assert {r for r, _ in cover} == {0, 1} and {c for _, c in cover} == set(range(4, 8))
    assert t[1].nonzero().tolist() == [[1, 6]]          # centre (375, 125)
    assert t[2:, 1, 6].tolist() == [0.25, 0.0, 0.5, 0.25]   # its corners, absolute
    assert t[2:].count_nonzero() == 3


def test_a_box_smaller_than_a_sub_cell_still_gets_one_and_edges_stay_inside():
    t = box_targets([(501, 502, 503, 504), (990, 990, 1000, 1000)], rows=2, cols=2, sub=2)
    assert t[0, 2, 2] == 1 and t[1, 2, 2] == 1
    assert t[0, 3, 3] == 1 and t[1, 3, 3] == 1
    assert int(t[0].sum()) == 2 and int(t[1].sum()) == 2
    assert box_targets([], 2, 2, 2).sum() == 0            # a frame without boxes: all 0


def test_head_writes_each_token_into_its_own_cell_of_the_map():
    head = VisionAuxHead(dim=6, sub=2)
    rows, cols = 2, 3
    tokens = torch.randn(rows * cols, 6)
    out = head(tokens, rows, cols)
    assert out.shape == (6, 4, 6)
    for k in range(rows * cols):
        r, c = divmod(k, cols)
        own = head.proj(head.norm(tokens[k])).view(6, 2, 2)
        assert torch.allclose(out[:, 2 * r:2 * r + 2, 2 * c:2 * c + 2], own, atol=1e-6)


def test_the_processor_lays_patches_out_as_the_targets_assume():
    """The targets assume merged token k covers the k-th cell of the merged grid in raster
    order. Checked against the real processor: the four patches of a merged token are
    consecutive rows of pixel_values, merged tokens in raster order."""
    model = Wamdiff2Model.from_preset("tiny", paradigm="ar", block_size=1)
    proc = model.processor
    img = np.zeros((128, 256, 3), np.uint8)
    img[64:80, 96:112] = 255                 # one 16 x 16 patch: patch row 4, column 6
    enc = proc.encode_prompts(["<image>"], [[img]])
    grid = enc["image_grid_thw"][0].tolist()
    assert grid == [1, 8, 16]
    values = enc["pixel_values"]
    bright = (values.abs().sum(-1) > values.abs().sum(-1).min() + 1e-3).nonzero().flatten()
    assert len(bright) == 1
    merged = int(bright[0]) // 4
    cols = grid[2] // 2
    assert divmod(merged, cols) == (4 // 2, 6 // 2)
    assert int(bright[0]) % 4 == (4 % 2) * 2 + 6 % 2      # top-left of its 2 x 2 window


def test_boxes_are_read_from_the_detection_records(toy_data):
    samples = load_samples(toy_data)
    index = boxes_by_image(samples)
    det = [s for s in samples if s.task == "detection"]
    assert len(index) == len(det) == 6
    assert all(len(v) == 1 for v in index.values())
    x1, y1, x2, y2 = index[det[0].images[0]][0]
    assert 0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000


def _recipe(toy_data, out, *extra):
    return build_recipe({}, tiny_overrides(toy_data, out, "ar") + [
        "vision_aux.weight=1.0", "vision_aux.subgrid=4", "output.save_every=2",
        "output.keep_last=3", *extra])


def test_a_run_with_the_target_trains_resumes_exactly_and_saves_a_plain_model(
        toy_data, tmp_path):
    ref = tmp_path / "ref"
    final = train(_recipe(toy_data, ref, "train.steps=4"), log=lambda *a: None)
    rows = read_metrics(ref)
    aux = [r["vision_aux"] for r in rows]
    assert len(aux) == 4 and all(np.isfinite(aux)) and aux[0] > 0
    for _, path in ckpt.list_checkpoints(ref):     # the head is in the shards (safetensors)
        assert any(k.startswith("aux/") for k in _shard_keys(path))
    Wamdiff2Model.from_pretrained(final)           # a plain checkpoint: no extra tensors

    run = tmp_path / "run"                         # the step-2 checkpoint, resumed
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(ref / "checkpoints" / "step-00000002",
                    run / "checkpoints" / "step-00000002")
    train(_recipe(toy_data, run, "train.steps=4"), resume=True, log=lambda *a: None)
    got = {int(r["step"]): r for r in read_metrics(run)}
    for r in rows[2:]:
        for key in ("loss", "vision_aux"):
            assert got[int(r["step"])][key] == pytest.approx(r[key], rel=1e-5, abs=1e-6)

    # a run without the head does not resume a checkpoint written with one
    with pytest.raises(RecipeError, match="recipe key 'vision_aux.weight' was 1.0"):
        train(_recipe(toy_data, run, "train.steps=4", "vision_aux.weight=0"), resume=True,
              log=lambda *a: None)


def _shard_keys(path) -> set[str]:
    from safetensors import safe_open

    keys = set()
    for f in (path / ckpt.SHARDS_DIR).glob("*.safetensors"):
        with safe_open(str(f), framework="pt") as handle:
            keys |= set(handle.keys())
    return keys


def test_off_by_default_and_a_bad_weight_is_refused(toy_data, tmp_path):
    plain = build_recipe({}, tiny_overrides(toy_data, tmp_path / "p", "ar"))
    assert plain.vision_aux.weight == 0
    train(plain, log=lambda *a: None)
    assert "vision_aux" not in read_metrics(tmp_path / "p")[0]
    with pytest.raises(RecipeError, match="vision_aux.weight"):
        validate(build_recipe({}, tiny_overrides(toy_data, tmp_path / "q", "ar")
                              + ["vision_aux.weight=-1"]))


def test_corner_errors_cost_sub_cells():
    """One sub-cell of error in every corner costs 1 beside the cross-entropy, whatever the
    grid's size (fractions of the image would make it ~1/64 here)."""
    import torch

    from wamdiff2_core.training.vision_aux import target_loss

    t = box_targets([(250, 0, 500, 250)], rows=2, cols=4, sub=4)     # 8 x 16 sub-cells
    pw = torch.tensor(1.0)
    exact = t.clone()
    exact[:2] = torch.where(t[:2] > 0, 50.0, -50.0)                 # the maps all but exact
    off = exact.clone()
    off[2:, 1, 6] += torch.tensor([1 / 16, 1 / 8, 1 / 16, 1 / 8])   # one sub-cell each way
    assert abs((target_loss(off, t, pw) - target_loss(exact, t, pw)).item() - 1.0) < 1e-5
