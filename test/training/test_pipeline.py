"""`wamdiff2 pipeline`: stages chained through their outputs, resumable, final model copied."""
import pytest

from wamdiff2_core.apps.cli import main
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training.config import RecipeError, find_recipe, load_recipe
from wamdiff2_core.training.pipeline import load_plan, run_pipeline

FAST = ["train.precision=fp32", "output.tensorboard=false", "output.progress=false",
        "train.global_batch=2", "train.micro_batch=2", "data.limit=4"]

MINI_PLAN = """
teacher_preset: tiny
final: distill
stages:
  - {name: ar, recipe: stage0_ar.yaml, set: {model.init: "{preset}"}}
  - {name: b4, recipe: block4.yaml, set: {model.init: "{out}/ar/final"}}
  - {name: b8, recipe: block8.yaml, set: {model.init: "{out}/b4/final"}}
  - {name: distill, recipe: distill_block.yaml,
     set: {model.init: "{out}/b8/final", distill.teacher: "{out}/b4/final",
           distill.teacher_block_size: 4, model.block_size: 8}}
"""


def test_shipped_plan_runs_stage_0_to_III():
    plan = load_plan("pipeline.yaml")
    names = [s.name for s in plan.stages]
    assert names[:5] == ["stage0_ar", "block4", "block8", "block16", "block32"]
    assert plan.final == "distill_cross" and plan.teacher_preset == "small"
    for stage in plan.stages:
        load_recipe(find_recipe(stage.recipe))


def test_mini_pipeline_chains_stages_and_resumes(tmp_path, toy_data):
    plan = tmp_path / "plan.yaml"
    plan.write_text(MINI_PLAN)
    out = tmp_path / "out"
    logs = []
    final = run_pipeline("tiny", toy_data, out, plan, FAST, steps_scale=0.001, log=logs.append)
    assert final == out / "final"
    model = Wamdiff2Model.from_pretrained(final)
    assert model.fields.paradigm == "diffusion" and model.fields.block_size == 8
    assert load_recipe(out / "b8" / "recipe.yaml").model.init == str(out / "b4" / "final")
    assert any("stage 4/4 distill" in line for line in logs)
    again = []
    run_pipeline("tiny", toy_data, out, plan, FAST, steps_scale=0.001, resume=True,
                 log=again.append)
    assert sum("already done" in line for line in again) == 4


def test_pipeline_bad_plan_and_cli_errors(tmp_path, toy_data, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("stages: [{name: a, recipe: stage0_ar.yaml, sett: {}}]\n")
    with pytest.raises(RecipeError, match="'sett'"):
        load_plan(plan)
    assert main(["pipeline", "--preset", "tiny", "--data", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow  # ten stages, including the `small` teacher: minutes on the CI machine
def test_shipped_pipeline_one_step_per_stage(tmp_path, toy_data):
    assert main(["pipeline", "--preset", "tiny", "--data", str(toy_data), "--out",
                 str(tmp_path), "--steps-scale", "0.001"] + FAST) == 0
    model = Wamdiff2Model.from_pretrained(tmp_path / "final")
    assert model.fields.block_size == 32
    teacher = Wamdiff2Model.from_pretrained(tmp_path / "teacher_block32" / "final")
    assert teacher.num_parameters() > 2 * model.num_parameters()
