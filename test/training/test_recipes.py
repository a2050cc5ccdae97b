"""Recipes: YAML + overrides into frozen dataclasses; bad recipes fail at start, clearly."""
import dataclasses
from pathlib import Path

import pytest
from PIL import Image

from conftest import tiny_overrides

from wamdiff2_core.apps.cli import main
from wamdiff2_core.training.config import (RecipeError, build_recipe, find_recipe, load_recipe,
                                           recipe_dir)
from wamdiff2_core.training.validate import validate

SHIPPED = ["stage0_ar.yaml", "block4.yaml", "block8.yaml", "block16.yaml", "block32.yaml",
           "ar_to_block32.yaml", "distill_block.yaml", "distill_cross.yaml",
           "distill_cross_ar_teacher.yaml"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_recipes_load(name):
    recipe = load_recipe(recipe_dir() / name)
    assert recipe.data.max_answer_tokens % recipe.model.block_size == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.train.steps = 3


def test_block_chain_initialises_each_stage_from_the_previous():
    inits = [load_recipe(recipe_dir() / f"block{b}.yaml").model.init for b in (4, 8, 16, 32)]
    assert inits == ["runs/stage0_ar/final", "runs/block4/final", "runs/block8/final",
                     "runs/block16/final"]


def test_overrides_are_dotted_and_typed():
    r = build_recipe({}, ["optim.lr=1e-4", "train.steps=7", "data.tasks=[planning, qa]",
                          "distill.teacher_block_size=8", "output.tensorboard=false"])
    assert r.optim.lr == 1e-4 and r.train.steps == 7 and r.data.tasks == ("planning", "qa")
    assert r.distill.teacher_block_size == 8 and r.output.tensorboard is False


def test_task_weights_and_image_budget_are_recipe_keys(toy_data, tmp_path):
    r = build_recipe({"data": {"task_weights": {"detection": 2}}},
                     ["data.task_weights.qa=0.5", "model.max_pixels=61440"])
    assert r.data.task_weights == {"detection": 2.0, "qa": 0.5}
    assert r.model.max_pixels == 61440
    assert build_recipe({}, ["data.task_weights={planning: 3}"]).data.task_weights == \
        {"planning": 3.0}
    with pytest.raises(RecipeError, match="must be a mapping"):
        build_recipe({}, ["data.task_weights=2"])
    with pytest.raises(RecipeError, match="unknown recipe key 'data.tasks.qa'"):
        build_recipe({}, ["data.tasks.qa=1"])
    base = tiny_overrides(toy_data, tmp_path)
    for weight in ("0", "inf", "nan"):
        with pytest.raises(RecipeError, match="data.task_weights must be finite and > 0"):
            validate(build_recipe({}, base + [f"data.task_weights.qa={weight}"]))
    with pytest.raises(RecipeError, match="need data.group_by_task"):
        validate(build_recipe({}, base + ["data.task_weights.qa=2",
                                          "data.group_by_task=false"]))
    with pytest.raises(RecipeError, match="model.max_pixels"):
        validate(build_recipe({}, base + ["model.max_pixels=-1"]))
    with pytest.raises(RecipeError, match="train.loss_norm must be one of"):
        validate(build_recipe({}, base + ["train.loss_norm=tokens"]))
    with pytest.raises(RecipeError, match=r"data.length_bucket must be an integer in \[0, "):
        validate(build_recipe({}, base + ["data.length_bucket=-2"]))


def test_a_task_weight_for_a_task_without_records_is_an_error(toy_data, tmp_path):
    from wamdiff2_core.training.engine import Trainer

    recipe = build_recipe({}, tiny_overrides(toy_data, tmp_path) + ["data.task_weights.lidar=2"])
    with pytest.raises(RecipeError, match="names task 'lidar'"):
        Trainer(recipe, log=lambda *a: None)
    only = build_recipe({}, tiny_overrides(toy_data, tmp_path / "b")
                        + ["data.tasks=[qa]", "data.task_weights.planning=2"])
    assert Trainer(only, log=lambda *a: None).order.mix() == {"qa": 1.0}   # left out: fine


def test_max_pixels_sets_the_image_budget_of_the_trained_model(toy_data, tmp_path):
    from wamdiff2_core.model.modeling import Wamdiff2Model
    from wamdiff2_core.training.engine import train

    recipe = build_recipe({}, tiny_overrides(toy_data, tmp_path / "a", "ar")
                          + ["train.steps=1", "model.max_pixels=61440"])
    final = train(recipe, log=lambda *a: None)
    model = Wamdiff2Model.from_pretrained(final)
    assert model.processor.config.max_pixels == 61440
    grid = model.processor.process_images([Image.new("RGB", (320, 180))])["image_grid_thw"]
    assert grid.tolist() == [[1, 12, 20]]                     # 320x192: every pixel kept
    again = build_recipe({}, tiny_overrides(toy_data, tmp_path / "b", "diffusion",
                                            init=str(final)) + ["train.steps=1"])
    assert Wamdiff2Model.from_pretrained(train(again, log=lambda *a: None)) \
        .processor.config.max_pixels == 61440                 # a checkpoint keeps its own


def test_min_pixels_scales_small_frames_up(toy_data, tmp_path):
    from wamdiff2_core.model.modeling import Wamdiff2Model
    from wamdiff2_core.training.engine import train

    base = tiny_overrides(toy_data, tmp_path / "a", "ar")
    with pytest.raises(RecipeError, match="model.min_pixels .* must not exceed"):
        validate(build_recipe({}, base + ["model.min_pixels=9000", "model.max_pixels=8000"]))
    with pytest.raises(RecipeError, match="model.min_pixels"):
        validate(build_recipe({}, base + ["model.min_pixels=-5"]))
    with pytest.raises(RecipeError, match="exceeds the image budget of tiny"):
        train(build_recipe({}, base + ["train.steps=1", "model.min_pixels=50000"]),
              log=lambda *a: None)
    final = train(build_recipe({}, tiny_overrides(toy_data, tmp_path / "b", "ar") + [
        "train.steps=1", "model.min_pixels=114688", "model.max_pixels=114688"]),
        log=lambda *a: None)
    model = Wamdiff2Model.from_pretrained(final)
    grid = model.processor.process_images([Image.new("RGB", (320, 180))])["image_grid_thw"]
    assert grid.tolist() == [[1, 16, 30]]                   # 480x256: 120 visual tokens


def test_prediction_key_makes_and_keeps_a_shifted_model(toy_data, tmp_path, ar_checkpoint):
    from wamdiff2_core.model.modeling import Wamdiff2Model
    from wamdiff2_core.training.engine import train

    with pytest.raises(RecipeError, match="model.prediction must be 'own', 'shifted'"):
        validate(build_recipe({}, tiny_overrides(toy_data, tmp_path / "x") +
                              ["model.prediction=next"]))
    with pytest.raises(RecipeError, match="model.decode_commit_rule must be empty or one of"):
        validate(build_recipe({}, tiny_overrides(toy_data, tmp_path / "x") +
                              ["model.decode_commit_rule=fast"]))
    shifted = train(build_recipe({}, tiny_overrides(toy_data, tmp_path / "s", init=str(
        ar_checkpoint)) + ["train.steps=1", "model.prediction=shifted",
                           "model.decode_commit_rule=low_confidence_frontier",
                           "model.decode_threshold=0.95"]), log=lambda *a: None)
    fields = Wamdiff2Model.from_pretrained(shifted).fields
    assert (fields.shift, fields.decode_commit_rule, fields.decode_threshold) == \
        (True, "low_confidence_frontier", 0.95)
    kept = train(build_recipe({}, tiny_overrides(toy_data, tmp_path / "k", init=str(shifted),
                                                 block=8) + ["train.steps=1"]),
                 log=lambda *a: None)                      # "": the init's own
    fields = Wamdiff2Model.from_pretrained(kept).fields
    assert (fields.shift, fields.decode_commit_rule) == (True, "low_confidence_frontier")
    own = train(build_recipe({}, tiny_overrides(toy_data, tmp_path / "o", init=str(
        ar_checkpoint)) + ["train.steps=1"]), log=lambda *a: None)
    assert Wamdiff2Model.from_pretrained(own).fields.shift is False
    ar = train(build_recipe({}, tiny_overrides(toy_data, tmp_path / "a", "ar", init=str(
        shifted)) + ["train.steps=1"]), log=lambda *a: None)    # an AR model is never shifted
    assert Wamdiff2Model.from_pretrained(ar).fields.shift is False


@pytest.mark.parametrize("override,key", [("optim.learning_rate=1", "optim.learning_rate"),
                                          ("trian.steps=3", "trian.steps"),
                                          ("bogus=1", "bogus")])
def test_unknown_override_names_the_key(override, key):
    with pytest.raises(RecipeError, match=f"unknown recipe key '{key}'"):
        build_recipe({}, [override])


def test_unknown_key_in_file_names_the_key(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("objective: diffusion\ntrain: {steps: 3, warmup: 2}\n")
    with pytest.raises(RecipeError, match="unknown recipe key 'train.warmup'"):
        load_recipe(f)


def test_wrong_type_is_an_error():
    with pytest.raises(RecipeError, match="train.steps"):
        build_recipe({}, ["train.steps=many"])


def test_missing_data_path_fails_validation(tmp_path):
    r = build_recipe({}, [f"data.path={tmp_path / 'nope'}"])
    with pytest.raises(RecipeError, match="data.path .* does not exist"):
        validate(r)


def test_block_size_that_does_not_divide_the_answer_layout(toy_data, tmp_path):
    r = build_recipe({}, tiny_overrides(toy_data, tmp_path, block=12))
    with pytest.raises(RecipeError, match="block size 12 does not divide the answer layout"):
        validate(r)


def test_teacher_block_must_divide_the_student_block(toy_data, tmp_path, ar_checkpoint):
    r = build_recipe({}, tiny_overrides(toy_data, tmp_path, "distill", block=8) + [
        f"distill.teacher={ar_checkpoint}", "distill.teacher_block_size=3"])
    with pytest.raises(RecipeError, match="teacher block size 3 does not divide"):
        validate(r)


def test_global_batch_must_split_over_processes(toy_data, tmp_path):
    r = build_recipe({}, tiny_overrides(toy_data, tmp_path) + ["train.global_batch=6",
                                                              "train.micro_batch=4"])
    with pytest.raises(RecipeError, match="global_batch=6"):
        validate(r)
    validate(build_recipe({}, tiny_overrides(toy_data, tmp_path)), world_size=1)


def test_find_recipe_by_shipped_name():
    assert find_recipe("block32.yaml") == recipe_dir() / "block32.yaml"
    with pytest.raises(RecipeError, match="does not exist"):
        find_recipe("block33.yaml")


def test_cli_reports_a_bad_recipe_in_one_sentence(capsys, toy_data):
    assert main(["train", "--config", "block8.yaml", f"data.path={toy_data}",
                 "optim.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe key 'optim.lrr'" in err and "Traceback" not in err
    assert main(["train", "--config", "block8.yaml", "data.path=/no/such/dir"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_refuses_to_overwrite_a_run_without_resume(capsys, toy_data, tmp_path):
    (tmp_path / "checkpoints" / "step-00000002").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-00000002" / "trainer_state.json").write_text("{}")
    args = ["train", "--config", "block4.yaml"] + tiny_overrides(toy_data, tmp_path)
    assert main(args) == 2
    assert "--resume" in capsys.readouterr().err
