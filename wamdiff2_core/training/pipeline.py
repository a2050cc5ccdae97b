"""The stage chain: stage 0 -> I -> II -> III as a list of recipes (``pipeline.yaml``).

Each stage is a recipe plus overrides with ``{preset}``, ``{teacher_preset}``, ``{data}`` and
``{out}`` filled in (a stage trains on ``--data`` unless its overrides set ``data.path``);
stages run one after the other in this process. Every recipe is built
and validated before its stage starts; a stage whose ``final`` directory exists is skipped,
and a stage with checkpoints resumes, so an interrupted pipeline continues where it stopped
when rerun with ``resume=True``.
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from wamdiff2_core.training.config import (RecipeError, find_recipe, load_recipe,
                                           read_recipe_yaml)
from wamdiff2_core.training.distributed import DistContext
from wamdiff2_core.training.engine import FINAL_DIR, train
from wamdiff2_core.training.validate import check_numbers


@dataclass(frozen=True)
class Stage:
    name: str
    recipe: str
    set: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PipelinePlan:
    stages: tuple[Stage, ...]
    final: str
    teacher_preset: str = "small"


def load_plan(path: str | Path) -> PipelinePlan:
    """Read a pipeline YAML (see ``config/training/pipeline.yaml``)."""
    path = find_recipe(path)
    raw = read_recipe_yaml(path, "pipeline file") or {}
    if not isinstance(raw, dict):
        raise RecipeError(f"pipeline file {path} must hold a mapping")
    unknown = set(raw) - {"stages", "final", "teacher_preset"}
    if unknown:
        raise RecipeError(f"unknown pipeline key '{sorted(map(str, unknown))[0]}'")
    if not isinstance(raw.get("stages", []), list):
        raise RecipeError(f"pipeline file {path}: stages must be a list")
    stages = []
    for s in raw.get("stages", []):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or \
                not isinstance(s.get("recipe"), str) or not isinstance(s.get("set", {}), dict):
            raise RecipeError(f"pipeline file {path}: each stage must be a mapping with a "
                              f"name and a recipe (strings) and an optional set mapping")
        extra = set(s) - {"name", "recipe", "set"}
        if extra:
            raise RecipeError(f"unknown pipeline stage key '{sorted(map(str, extra))[0]}'")
        stages.append(Stage(s["name"], s["recipe"], dict(s.get("set", {}))))
    if not stages:
        raise RecipeError("the pipeline has no stages")
    final = raw.get("final", stages[-1].name)
    if not isinstance(final, str) or final not in {s.name for s in stages}:
        raise RecipeError(f"pipeline final stage '{final}' is not one of its stages")
    return PipelinePlan(tuple(stages), final, raw.get("teacher_preset", "small"))


def stage_overrides(stage: Stage, values: dict, out: Path, steps_scale: float,
                    steps: int) -> list[str]:
    """The ``key=value`` list of one stage: its ``set`` entries (placeholders filled), its
    data path (``--data``, unless the stage sets ``data.path`` itself), its output path and
    its scaled step count."""
    items = [f"{k}={str(v).format(**values)}" for k, v in stage.set.items()]
    if "data.path" not in stage.set:
        items.append(f"data.path={values['data']}")
    items.append(f"output.dir={out / stage.name}")
    if steps_scale != 1.0:
        items.append(f"train.steps={max(1, math.ceil(steps * steps_scale))}")
    return items


def run_pipeline(preset: str, data: str | Path, out: str | Path,
                 plan: str | Path = "pipeline.yaml", overrides: list[str] = (),
                 steps_scale: float = 1.0, resume: bool = False, log=print) -> Path:
    """Run every stage of ``plan``; returns ``out/final`` (a copy of the final stage's
    model, the checkpoint the Planner loads)."""
    plan_ = load_plan(plan)
    out = Path(out)
    ctx = DistContext.from_env()          # under torchrun: rank 0 logs and copies the result
    if not ctx.is_main:
        log = lambda *a, **k: None        # noqa: E731
    values = {"preset": preset, "teacher_preset": plan_.teacher_preset, "data": str(data),
              "out": str(out)}
    recipes = []
    for stage in plan_.stages:        # every stage's numbers are checked before stage 1 runs
        recipe_path = find_recipe(stage.recipe)
        base = load_recipe(recipe_path)
        recipe = load_recipe(recipe_path, stage_overrides(stage, values, out, steps_scale,
                                                          base.train.steps)
                             + list(overrides))
        try:
            check_numbers(recipe)
        except RecipeError as exc:
            raise RecipeError(f"pipeline stage {stage.name}: {exc}") from None
        recipes.append(recipe)
    for i, (stage, recipe) in enumerate(zip(plan_.stages, recipes), 1):
        final = out / stage.name / FINAL_DIR
        if resume and (final / "config.json").exists():
            log(f"pipeline: stage {i}/{len(plan_.stages)} {stage.name} already done")
            continue
        log(f"pipeline: stage {i}/{len(plan_.stages)} {stage.name} ({recipe.objective}, "
            f"{recipe.train.steps} steps) from {recipe.model.init}")
        train(recipe, resume=resume, log=log)
    src, dst = out / plan_.final / FINAL_DIR, out / FINAL_DIR
    if ctx.is_main:
        tmp = out / f".tmp-{FINAL_DIR}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)
        log(f"pipeline: final model {dst} (from stage {plan_.final})")
    ctx.barrier()
    return dst
