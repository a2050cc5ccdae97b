"""Checks of a recipe that run before anything is loaded: a bad recipe fails at start."""
from __future__ import annotations

import json
from pathlib import Path

from wamdiff2_core.diffusion.losses import DIVERGENCES
from wamdiff2_core.diffusion.noise import SCHEDULES
from wamdiff2_core.model.config import PARADIGMS, paradigm_block_size
from wamdiff2_core.model.presets import PRESETS, is_preset
from wamdiff2_core.training.config import (
    LOSS_NORMS, OBJECTIVES, PRECISIONS, STRATEGIES, Recipe, RecipeError,
)

OBJECTIVE_PARADIGM = {"ar": "ar", "diffusion": "diffusion", "distill": "diffusion"}


def _check_init(init: str, what: str) -> None:
    if is_preset(init):
        return
    path = Path(init)
    if not path.is_dir():
        raise RecipeError(f"{what} '{init}' is neither a preset ({', '.join(sorted(PRESETS))}) "
                          f"nor an existing checkpoint directory")
    if not (path / "config.json").exists():
        raise RecipeError(f"{what} '{init}' is not a checkpoint directory (no config.json)")


def checkpoint_fields(path: str | Path) -> dict:
    """The ``wamdiff2`` diffusion fields of a checkpoint's config.json ({} if absent)."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    return cfg.get("wamdiff2", {}) or {}


def effective_block_size(recipe: Recipe) -> int:
    """Block size the student trains with (1 for the AR objective)."""
    return paradigm_block_size(recipe.model.paradigm, recipe.model.block_size)


def teacher_block_size(recipe: Recipe) -> int:
    """The distillation teacher's block size: the recipe's, else its checkpoint's own."""
    fields = checkpoint_fields(recipe.distill.teacher)
    return recipe.distill.teacher_block(fields.get("paradigm", "diffusion"),
                                        int(fields.get("block_size", 32)))


def validate(recipe: Recipe, world_size: int = 1) -> None:
    """Raise RecipeError (one sentence naming the culprit) unless ``recipe`` can run with
    ``world_size`` processes."""
    r = recipe
    if r.objective not in OBJECTIVES:
        raise RecipeError(f"objective must be one of {OBJECTIVES}, got '{r.objective}'")
    if r.model.paradigm not in PARADIGMS:
        raise RecipeError(f"model.paradigm must be one of {PARADIGMS}, got '{r.model.paradigm}'")
    if OBJECTIVE_PARADIGM[r.objective] != r.model.paradigm:
        raise RecipeError(f"objective '{r.objective}' trains a '{OBJECTIVE_PARADIGM[r.objective]}'"
                          f" model but model.paradigm is '{r.model.paradigm}'")
    # --- data
    if not r.data.path:
        raise RecipeError("data.path is not set (pass data.path=DIR)")
    data = Path(r.data.path)
    if not data.is_dir():
        raise RecipeError(f"data.path '{data}' does not exist")
    if not (data / r.data.split).is_file():
        raise RecipeError(f"data set '{data}' has no {r.data.split}")
    _check_init(r.model.init, "model.init")
    if r.model.max_pixels < 0:
        raise RecipeError(f"model.max_pixels must be >= 0 (0: the init's own), "
                          f"got {r.model.max_pixels}")
    bad = {k: w for k, w in r.data.task_weights.items() if not w > 0}
    if bad:
        raise RecipeError(f"data.task_weights must be > 0 (use data.tasks to leave a task "
                          f"out), got {bad}")
    if (r.data.task_weights or r.data.length_bucket) and not r.data.group_by_task:
        raise RecipeError("data.task_weights and data.length_bucket need "
                          "data.group_by_task: true")
    if r.data.length_bucket < 0:
        raise RecipeError(f"data.length_bucket must be >= 0, got {r.data.length_bucket}")
    # --- layout
    bsz = effective_block_size(r)
    if bsz < 1:
        raise RecipeError(f"model.block_size must be >= 1, got {bsz}")
    if r.data.max_answer_tokens < 1 or r.data.max_answer_tokens % bsz:
        raise RecipeError(f"block size {bsz} does not divide the answer layout "
                          f"(data.max_answer_tokens={r.data.max_answer_tokens})")
    if r.noise.schedule not in SCHEDULES:
        raise RecipeError(f"noise.schedule must be one of {sorted(SCHEDULES)}, "
                          f"got '{r.noise.schedule}'")
    if not 0.0 < r.noise.eps < 1.0:
        raise RecipeError(f"noise.eps must be in (0, 1), got {r.noise.eps}")
    if r.objective == "distill":
        _validate_distill(r, bsz)
    # --- engine
    t, o = r.train, r.optim
    if r.train.precision not in PRECISIONS:
        raise RecipeError(f"train.precision must be one of {PRECISIONS}, got '{t.precision}'")
    if t.strategy not in STRATEGIES:
        raise RecipeError(f"train.strategy must be one of {STRATEGIES}, got '{t.strategy}'")
    if t.loss_norm not in LOSS_NORMS:
        raise RecipeError(f"train.loss_norm must be one of {LOSS_NORMS}, got '{t.loss_norm}'")
    if t.steps < 1 or t.micro_batch < 1:
        raise RecipeError("train.steps and train.micro_batch must be >= 1")
    per_step = t.micro_batch * world_size
    if t.global_batch % per_step:
        raise RecipeError(f"train.global_batch={t.global_batch} is not a multiple of "
                          f"train.micro_batch x processes = {t.micro_batch} x {world_size}")
    if o.lr <= 0 or o.vision_lr < 0 or o.warmup_steps < 0 or not 0 <= o.min_lr_ratio <= 1:
        raise RecipeError("optim: lr must be > 0, vision_lr and warmup_steps >= 0, "
                          "min_lr_ratio in [0, 1]")
    if r.output.save_every < 1 or r.output.log_every < 1 or r.output.keep_last < 1:
        raise RecipeError("output.save_every, output.log_every and output.keep_last must be "
                          ">= 1")


def _validate_distill(r: Recipe, bsz: int) -> None:
    d = r.distill
    if not d.teacher:
        raise RecipeError("distill.teacher is not set (a checkpoint directory)")
    _check_init(d.teacher, "distill.teacher")
    if is_preset(d.teacher):
        raise RecipeError("distill.teacher must be a trained checkpoint directory, not a preset")
    if d.divergence not in DIVERGENCES:
        raise RecipeError(f"distill.divergence must be one of {sorted(DIVERGENCES)}, "
                          f"got '{d.divergence}'")
    if not 0.0 < d.beta < 1.0:
        raise RecipeError(f"distill.beta must be in (0, 1), got {d.beta}")
    if d.temperature <= 0 or not 0.0 <= d.lam <= 1.0:
        raise RecipeError("distill.temperature must be > 0 and distill.lam in [0, 1]")
    if d.on_policy_every < 0:
        raise RecipeError("distill.on_policy_every must be >= 0")
    tb = d.teacher_block_size or teacher_block_size(r)     # as asked, else as it will run
    if tb < 1 or bsz % tb:
        raise RecipeError(f"teacher block size {tb} does not divide the student's "
                          f"block size {bsz}")
    if checkpoint_fields(d.teacher).get("paradigm") == "ar" and tb != 1:
        raise RecipeError(f"distill.teacher is an AR checkpoint; its block size is 1, not {tb}")
