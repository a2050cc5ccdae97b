"""Checks of a recipe that run before anything is loaded: a bad recipe fails at start.

Two passes, each raising one RecipeError sentence that names the key:

- ``check_early``: every numeric field of the recipe is finite and inside its range
  (``check_numbers`` with ``NUMERIC_RANGES``, one entry per field; a test keeps the table
  complete), the data set and split exist, ``output.dir`` is (or can become) a writable
  directory. It needs no torch, so ``wamdiff2 train`` refuses these in about a second,
  before the trainer (torch, transformers) is even imported.
- ``validate``: ``check_early``, then names (objective, paradigm, schedule, divergence,
  precision, strategy), model.init and the teacher, the answer layout and the batch
  arithmetic. It imports the registries it checks names against.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from pathlib import Path

from wamdiff2_core.image_files import MAX_IMAGE_PIXELS
from wamdiff2_core.output_paths import OutputPathError, check_output_path
from wamdiff2_core.training.config import (LOSS_NORMS, OBJECTIVES, PRECISIONS, PREDICTIONS,
                                            STRATEGIES, TEACHER_PLACEMENTS, Recipe,
                                            RecipeError)

OBJECTIVE_PARADIGM = {"ar": "ar", "diffusion": "diffusion", "distill": "diffusion"}
MAX_BATCH = 65536          # samples per global batch or per forward
MAX_TOKENS = 65536         # answer layout and block lengths
MAX_THREADS = 1024
MAX_SEED = 2 ** 63 - 1


@dataclass(frozen=True)
class Range:
    """An interval of allowed values (None: unbounded on that side); always finite."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high
                                         or (self.high_open and value == self.high))

    def describe(self) -> str:
        """``"> 0"``, ``"in [0, 1)"``, ``">= 1"`` ..."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_text(self.low)}"
        return (f"in {'(' if self.low_open else '['}{_text(self.low)}, {_text(self.high)}"
                f"{')' if self.high_open else ']'}")


def _text(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


UNIT = Range(0.0, 1.0)
OPEN_UNIT = Range(0.0, 1.0, low_open=True, high_open=True)
COUNT = Range(0)                      # 0 allowed (0 = off / all / default)
POSITIVE = Range(1)
SEED = Range(0, MAX_SEED)

#: Every numeric recipe field (dotted key) and its allowed values. Tuples: each item.
NUMERIC_RANGES: dict[str, Range] = {
    "model.block_size": Range(1, MAX_TOKENS),
    "model.max_pixels": Range(0, MAX_IMAGE_PIXELS),   # 0: the init's own budget
    "model.min_pixels": Range(0, MAX_IMAGE_PIXELS),   # 0: the init's own floor
    "model.decode_threshold": UNIT,                   # 0: the init's own
    "model.seed": SEED,
    "data.max_answer_tokens": Range(1, MAX_TOKENS),
    "data.limit": COUNT,
    "data.length_bucket": Range(0, MAX_TOKENS),       # 0: no length buckets
    "data.lateral_status_dropout": UNIT,
    "noise.eps": OPEN_UNIT,
    "distill.teacher_block_size": Range(0, MAX_TOKENS),
    "distill.beta": OPEN_UNIT,
    "distill.temperature": Range(0.0, 100.0, low_open=True),   # the KD term scales by T^2
    "distill.lam": UNIT,
    "distill.on_policy_every": COUNT,
    "distill.on_policy_steps_per_block": Range(0, MAX_TOKENS),
    "vision_aux.weight": Range(0.0, 100.0),        # 0: off
    "vision_aux.subgrid": Range(1, 32),
    "vision_aux.pos_weight": Range(0.0, 1000.0, low_open=True),
    "optim.lr": Range(0.0, 1.0, low_open=True),
    "optim.vision_lr": UNIT,
    "optim.weight_decay": UNIT,          # with lr <= 1, decoupled decay never flips a sign
    "optim.betas": Range(0.0, 1.0, high_open=True),
    "optim.warmup_steps": COUNT,
    "optim.min_lr_ratio": UNIT,
    "optim.grad_clip": Range(0.0),       # 0: no clipping
    "train.steps": POSITIVE,
    "train.global_batch": Range(1, MAX_BATCH),
    "train.micro_batch": Range(1, MAX_BATCH),
    "train.seed": SEED,
    "train.threads": Range(0, MAX_THREADS),     # 0: leave torch's default
    "output.save_every": POSITIVE,
    "output.keep_last": POSITIVE,
    "output.log_every": POSITIVE,
}


def numeric_fields(cls=Recipe, prefix: str = "") -> dict[str, object]:
    """Dotted key -> type hint of every int, float or tuple-of-numbers field of ``cls``."""
    out: dict[str, object] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(hint):
            out.update(numeric_fields(hint, f"{prefix}{name}."))
        elif hint in (int, float) or (typing.get_origin(hint) is tuple and all(
                a in (int, float, Ellipsis) for a in typing.get_args(hint))):
            out[f"{prefix}{name}"] = hint
    return out


def _value(recipe: Recipe, key: str):
    node = recipe
    for part in key.split("."):
        node = getattr(node, part)
    return node


def check_numbers(recipe: Recipe) -> None:
    """RecipeError naming the first numeric field that is not finite or out of its range."""
    for key, hint in numeric_fields().items():
        allowed = NUMERIC_RANGES[key]
        value = _value(recipe, key)
        kind = "an integer" if hint is int else "a finite number"
        if typing.get_origin(hint) is tuple:
            args = typing.get_args(hint)
            if Ellipsis not in args and len(value) != len(args):
                raise RecipeError(f"{key} must be {len(args)} numbers, got {list(value)}")
            if not all(v in allowed for v in value):
                raise RecipeError(f"{key} must be numbers each {allowed.describe()}, got "
                                  f"{list(value)}")
        elif value not in allowed:
            raise RecipeError(f"{key} must be {kind} {allowed.describe()}, got {value!r}")


# ------------------------------------------------------------------------------ paths
def _check_init(init: str, what: str) -> None:
    from wamdiff2_core.model.presets import PRESETS, is_preset

    if is_preset(init):
        return
    path = Path(init)
    if not path.is_dir():
        raise RecipeError(f"{what} '{init}' is neither a preset ({', '.join(sorted(PRESETS))}) "
                          f"nor an existing checkpoint directory")
    if not (path / "config.json").exists():
        raise RecipeError(f"{what} '{init}' is not a checkpoint directory (no config.json)")


def check_output_dir(out: str) -> None:
    """RecipeError unless ``out`` is a directory, or can be made one, that we may write in
    (the check every writing command makes: ``output_paths.check_output_path``)."""
    try:
        check_output_path(out or ".", "output.dir", folder=True)
    except OutputPathError as exc:
        raise RecipeError(str(exc)) from None


def checkpoint_fields(path: str | Path) -> dict:
    """The ``wamdiff2`` diffusion fields of a checkpoint's config.json ({} if absent)."""
    from wamdiff2_core.user_files import read_json

    try:
        cfg = read_json(Path(path) / "config.json", "checkpoint config")
    except ValueError as exc:
        raise RecipeError(str(exc)) from None
    fields = cfg.get("wamdiff2", {}) if isinstance(cfg, dict) else None
    if fields is not None and not isinstance(fields, dict):
        raise RecipeError(f"checkpoint config {Path(path) / 'config.json'}: wamdiff2 must be "
                          f"a mapping")
    if fields is None:
        raise RecipeError(f"checkpoint config {Path(path) / 'config.json'} must hold a "
                          f"mapping")
    return fields


def effective_block_size(recipe: Recipe) -> int:
    """Block size the student trains with (1 for the AR objective)."""
    from wamdiff2_core.model.config import paradigm_block_size

    return paradigm_block_size(recipe.model.paradigm, recipe.model.block_size)


def teacher_block_size(recipe: Recipe) -> int:
    """The distillation teacher's block size: the recipe's, else its checkpoint's own."""
    fields = checkpoint_fields(recipe.distill.teacher)
    return recipe.distill.teacher_block(fields.get("paradigm", "diffusion"),
                                        int(fields.get("block_size", 32)))


def check_early(recipe: Recipe) -> None:
    """The checks that need no torch: every number, the data set's and the split's paths,
    and ``output.dir`` (RecipeError naming the first culprit)."""
    r = recipe
    check_numbers(r)
    if not r.data.path:
        raise RecipeError("data.path is not set (pass data.path=DIR or a records file)")
    data = Path(r.data.path)
    if not data.exists():
        raise RecipeError(f"data.path '{data}' does not exist")
    if data.is_dir() and not (data / r.data.split).is_file():
        raise RecipeError(f"data set '{data}' has no {r.data.split}")
    check_output_dir(r.output.dir)


def validate(recipe: Recipe, world_size: int = 1) -> None:
    """Raise RecipeError (one sentence naming the culprit) unless ``recipe`` can run with
    ``world_size`` processes."""
    from wamdiff2_core.diffusion.noise import SCHEDULES
    from wamdiff2_core.model.config import PARADIGMS
    from wamdiff2_core.decoding.config import COMMIT_RULES

    r = recipe
    check_early(r)
    if r.objective not in OBJECTIVES:
        raise RecipeError(f"objective must be one of {OBJECTIVES}, got '{r.objective}'")
    if r.model.paradigm not in PARADIGMS:
        raise RecipeError(f"model.paradigm must be one of {PARADIGMS}, got '{r.model.paradigm}'")
    if OBJECTIVE_PARADIGM[r.objective] != r.model.paradigm:
        raise RecipeError(f"objective '{r.objective}' trains a '{OBJECTIVE_PARADIGM[r.objective]}'"
                          f" model but model.paradigm is '{r.model.paradigm}'")
    _check_init(r.model.init, "model.init")
    if r.model.decode_commit_rule and r.model.decode_commit_rule not in COMMIT_RULES:
        raise RecipeError(f"model.decode_commit_rule must be empty or one of "
                          f"{', '.join(COMMIT_RULES)}, got '{r.model.decode_commit_rule}'")
    if r.model.prediction not in PREDICTIONS:
        raise RecipeError(f"model.prediction must be 'own', 'shifted' or empty (the init's "
                          f"own), got '{r.model.prediction}'")
    if r.model.max_pixels and r.model.min_pixels > r.model.max_pixels:
        raise RecipeError(f"model.min_pixels ({r.model.min_pixels}) must not exceed "
                          f"model.max_pixels ({r.model.max_pixels})")
    bad = {k: w for k, w in r.data.task_weights.items() if not 0 < w < math.inf}
    if bad:
        raise RecipeError(f"data.task_weights must be finite and > 0 (use data.tasks to leave "
                          f"a task out), got {bad}")
    if (r.data.task_weights or r.data.length_bucket) and not r.data.group_by_task:
        raise RecipeError("data.task_weights and data.length_bucket need "
                          "data.group_by_task: true")
    # --- layout
    bsz = effective_block_size(r)
    if r.data.max_answer_tokens % bsz:
        raise RecipeError(f"block size {bsz} does not divide the answer layout "
                          f"(data.max_answer_tokens={r.data.max_answer_tokens})")
    if r.noise.schedule not in SCHEDULES:
        raise RecipeError(f"noise.schedule must be one of {sorted(SCHEDULES)}, "
                          f"got '{r.noise.schedule}'")
    if r.objective == "distill":
        _validate_distill(r, bsz)
    # --- engine
    t = r.train
    if t.precision not in PRECISIONS:
        raise RecipeError(f"train.precision must be one of {PRECISIONS}, got '{t.precision}'")
    if t.strategy not in STRATEGIES:
        raise RecipeError(f"train.strategy must be one of {STRATEGIES}, got '{t.strategy}'")
    if t.loss_norm not in LOSS_NORMS:
        raise RecipeError(f"train.loss_norm must be one of {LOSS_NORMS}, got '{t.loss_norm}'")
    per_step = t.micro_batch * world_size
    if t.global_batch % per_step:
        raise RecipeError(f"train.global_batch={t.global_batch} is not a multiple of "
                          f"train.micro_batch x processes = {t.micro_batch} x {world_size}"
                          + (f" (with {world_size} processes, a train.micro_batch that divides"
                             f" {t.global_batch // world_size})"
                             if t.global_batch % world_size == 0 else ""))


def _validate_distill(r: Recipe, bsz: int) -> None:
    from wamdiff2_core.diffusion.losses import DIVERGENCES
    from wamdiff2_core.model.presets import is_preset

    d = r.distill
    if not d.teacher:
        raise RecipeError("distill.teacher is not set (a checkpoint directory)")
    _check_init(d.teacher, "distill.teacher")
    if is_preset(d.teacher):
        raise RecipeError("distill.teacher must be a trained checkpoint directory, not a preset")
    if d.teacher_placement not in TEACHER_PLACEMENTS:
        raise RecipeError(f"distill.teacher_placement must be one of {TEACHER_PLACEMENTS}, "
                          f"got '{d.teacher_placement}'")
    if d.divergence not in DIVERGENCES:
        raise RecipeError(f"distill.divergence must be one of {sorted(DIVERGENCES)}, "
                          f"got '{d.divergence}'")
    tb = d.teacher_block_size or teacher_block_size(r)     # as asked, else as it will run
    if tb < 1 or bsz % tb:
        raise RecipeError(f"teacher block size {tb} does not divide the student's "
                          f"block size {bsz}")
    if checkpoint_fields(d.teacher).get("paradigm") == "ar" and tb != 1:
        raise RecipeError(f"distill.teacher is an AR checkpoint; its block size is 1, not {tb}")
