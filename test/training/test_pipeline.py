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


def _plan_recipes(name: str, preset: str, out):
    """A shipped plan and each stage's recipe as the pipeline would build it ({out}: "o")."""
    from wamdiff2_core.training.pipeline import stage_overrides

    plan = load_plan(name)
    values = {"preset": preset, "teacher_preset": "small", "data": "d", "out": "o"}
    recipes = {}
    for stage in plan.stages:
        path = find_recipe(stage.recipe)
        recipes[stage.name] = load_recipe(path, stage_overrides(
            stage, values, out, 1.0, load_recipe(path).train.steps))
    return plan, recipes


def test_bundle_plan_trains_the_bundle_and_its_ar_teacher_from_one_checkpoint(tmp_path):
    """pipeline_bundle.yaml (the model card's command): an AR stage 0 and a block-32 stage,
    both from the checkpoint given as --preset; every detection answer of the simulator's
    frames (up to 288 tokens) fits, and the task mix is stated in the recipes."""
    plan, recipes = _plan_recipes("pipeline_bundle.yaml", "runs/prev", tmp_path)
    assert list(recipes) == ["stage0_ar", "block32_ft"]
    assert plan.final == "block32_ft"
    teacher, bundle = recipes["stage0_ar"], recipes["block32_ft"]
    assert (teacher.objective, teacher.model.paradigm) == ("ar", "ar")
    assert (bundle.objective, bundle.model.block_size) == ("diffusion", 32)
    for recipe in recipes.values():
        assert recipe.model.init == "runs/prev"
        assert recipe.data.max_answer_tokens >= 288 and recipe.train.loss_norm == "task"
        assert set(recipe.data.task_weights) == {"planning", "detection", "qa"}
        assert recipe.data.length_bucket > 0


def test_lateral_plan_chains_the_bundle_and_its_teacher_without_lateral_status(tmp_path):
    """pipeline_bundle_lateral.yaml: each chain starts from the
    given bundle or its ar_teacher/, its "bends" stages plan only and never see the lateral
    ego status, its last stage trains every task with half the planning prompts without it,
    and every stage passes the recipe checks."""
    from wamdiff2_core.training.validate import check_numbers

    plan, recipes = _plan_recipes("pipeline_bundle_lateral.yaml", "runs/b19", tmp_path)
    assert plan.final == "b_final"
    for recipe in recipes.values():
        check_numbers(recipe)
    assert recipes["b_mix"].model.init == "runs/b19"
    assert recipes["t_bends"].model.init == "runs/b19/ar_teacher"
    assert recipes["b_final"].model.init == "o/b_bends2/final"
    for name, recipe in recipes.items():
        assert (recipe.objective == "ar") == name.startswith("t_")
        if "bends" in name:
            assert recipe.data.tasks == ("planning",)
            assert recipe.data.lateral_status_dropout == 1.0
        else:
            assert recipe.data.tasks == () and recipe.data.lateral_status_dropout == 0.5
            assert recipe.data.task_weights["planning"] == 2.0



def test_recovery_plan_trains_the_bundle_and_its_teacher_from_the_given_pair(tmp_path):
    """pipeline_bundle_recovery.yaml (docs/training.md, "Recovery data"): the teacher from
    the given bundle's ar_teacher/, the bundle from the bundle, first every task with
    planning drawn twice as often and the lateral status kept, then each chain on the
    recovery sets alone, planning only, never the lateral status; every stage passes the
    recipe checks."""
    from wamdiff2_core.training.validate import check_numbers

    plan, recipes = _plan_recipes("pipeline_bundle_recovery.yaml", "runs/b19", tmp_path)
    assert plan.final == "b_lane"
    assert list(recipes) == ["t_rec", "b_rec", "t_lane", "b_lane"]
    assert recipes["t_rec"].model.init == "runs/b19/ar_teacher"
    assert recipes["b_rec"].model.init == "runs/b19"
    assert recipes["t_lane"].model.init == "o/t_rec/final"
    assert recipes["b_lane"].model.init == "o/b_rec/final"
    for name, recipe in recipes.items():
        check_numbers(recipe)
        assert (recipe.objective == "ar") == name.startswith("t_")
        assert recipe.objective == "ar" or recipe.model.block_size == 32
        assert recipe.data.max_answer_tokens >= 288
        if name.endswith("_rec"):
            assert recipe.data.tasks == () and recipe.data.lateral_status_dropout == 0.0
            assert recipe.data.task_weights["planning"] == 2.0 and recipe.data.path == "d"
        else:
            assert recipe.data.tasks == ("planning",)
            assert recipe.data.lateral_status_dropout == 1.0
            assert recipe.data.path == "data/pert_only"

def test_lane_plan_distils_the_lane_teacher_into_block_32_twice(tmp_path):
    """pipeline_bundle_lane.yaml: the lane teacher from the
    given bundle's ar_teacher/, then two block-32 students distilled from it (JSD, its AR
    view), one from its own weights and one from the bundle's; planning only, the lateral
    status never shown, every stage on {data} and through the recipe checks."""
    from wamdiff2_core.training.validate import check_numbers

    plan, recipes = _plan_recipes("pipeline_bundle_lane.yaml", "runs/b19", tmp_path)
    assert plan.final == "s_self"
    assert list(recipes) == ["t_lane", "s_self", "s_bundle"]
    assert recipes["t_lane"].model.init == "runs/b19/ar_teacher"
    assert recipes["t_lane"].objective == "ar"
    assert recipes["s_self"].model.init == "o/t_lane/final"
    assert recipes["s_bundle"].model.init == "runs/b19"
    for name, recipe in recipes.items():
        check_numbers(recipe)
        assert recipe.data.tasks == ("planning",) and recipe.data.lateral_status_dropout == 1.0
        assert recipe.data.path == "d"
        if name.startswith("s_"):
            assert recipe.objective == "distill" and recipe.model.block_size == 32
            assert recipe.distill.teacher == "o/t_lane/final"
            assert recipe.distill.teacher_block_size == 0 and recipe.distill.lam > 0


def test_vision_plan_trains_the_bundle_and_its_teacher_with_the_box_target(tmp_path):
    """pipeline_bundle_vision.yaml (docs/training.md, "The vision tower's box target"): the
    teacher from the given bundle's ar_teacher/, the bundle from the bundle, every task with
    detection drawn twice as often, the vision tower's box target on, every stage through
    the recipe checks."""
    from wamdiff2_core.training.validate import check_numbers

    plan, recipes = _plan_recipes("pipeline_bundle_vision.yaml", "runs/b19", tmp_path)
    assert plan.final == "block32_vis"
    assert recipes["stage0_vis"].model.init == "runs/b19/ar_teacher"
    assert recipes["block32_vis"].model.init == "runs/b19"
    for name, recipe in recipes.items():
        check_numbers(recipe)
        assert recipe.objective == ("ar" if name == "stage0_vis" else "diffusion")
        assert recipe.objective == "ar" or recipe.model.block_size == 32
        assert recipe.vision_aux.weight > 0 and recipe.data.tasks == ()
        assert recipe.data.task_weights["detection"] == 2.0
        assert recipe.data.max_answer_tokens >= 288 and recipe.data.path == "d"


@pytest.mark.slow  # two processes start, load and train twice: ~1 minute on the CI machine
def test_pipeline_under_torchrun_trains_every_stage_once(tmp_path, toy_data):
    """Two processes (torchrun, DDP) run the stages together; rank 0 alone logs and writes
    the pipeline's final copy."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    plan = tmp_path / "plan.yaml"
    plan.write_text(MINI_PLAN.split("  - {name: b8")[0].replace("final: distill",
                                                                  "final: b4"))
    out = tmp_path / "out"
    torchrun = Path(sys.executable).parent / "torchrun"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = ["--plan", str(plan), "--preset", "tiny", "--data", str(toy_data), "--out",
            str(out), "--steps-scale", "0.001", "train.threads=1",
            "train.global_batch=4", "train.micro_batch=2"] + FAST[:3] + ["data.limit=8"]
    proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_port",
                           str(29600 + os.getpid() % 1000), "-m", "wamdiff2_core.cli",
                           "pipeline"] + args, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("pipeline: final model") == 1
    assert proc.stdout.count("stage 2/2 b4") == 1
    model = Wamdiff2Model.from_pretrained(out / "final")
    assert model.fields.block_size == 4
