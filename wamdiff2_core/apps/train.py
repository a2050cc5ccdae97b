"""`wamdiff2 train`, `pipeline`, `export` and `memory-plan` (thin: parse -> recipe -> run).

Several processes: ``torchrun --nproc_per_node N -m wamdiff2_core.cli train --config ...``;
several nodes: ``torchrun --nnodes N --nproc_per_node G --rdzv-backend c10d --rdzv-endpoint
HOST:PORT --rdzv-id JOB -m wamdiff2_core.cli train ...`` on each (docs/training.md, "Scale";
scripts/slurm_train.sh).
"""
from __future__ import annotations

import os

from wamdiff2_core.apps.common import CliError, check_model_source
from wamdiff2_core.apps.outputs import check_output


def _train(args) -> int:
    from wamdiff2_core.training.config import RecipeError, find_recipe, load_recipe
    from wamdiff2_core.training.validate import check_early

    try:
        recipe = load_recipe(find_recipe(args.config), args.overrides)
        check_early(recipe)        # before torch loads: a bad number or path fails at once
    except RecipeError as exc:
        raise CliError(str(exc)) from None
    check_model_source(recipe.model.init)             # before torch loads: fast errors
    if recipe.objective == "distill":
        check_model_source(recipe.distill.teacher)
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.training.distributed import close_process_group
    from wamdiff2_core.training.engine import TrainingError, train

    try:
        train(recipe, resume=args.resume)
    except (RecipeError, CheckpointError, TrainingError) as exc:
        if int(os.environ.get("RANK", "0")) != 0:
            raise SystemExit(2) from None      # the first process says it, once
        raise CliError(str(exc)) from None
    finally:
        close_process_group()
    return 0


def _export(args) -> int:
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.training.export import export_checkpoint

    import sys

    def warn(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)

    try:
        out = export_checkpoint(args.checkpoint, args.out, warn=warn)
    except CheckpointError as exc:
        raise CliError(str(exc)) from None
    print(f"wrote the planner-loadable model of {args.checkpoint} to {out}")
    return 0


def _memory_plan(args) -> int:
    import json

    from wamdiff2_core.training.config import RecipeError, find_recipe, load_recipe
    from wamdiff2_core.training.validate import check_numbers

    _check_plan_numbers(args)
    try:
        recipe = load_recipe(find_recipe(args.config), args.overrides)
        check_numbers(recipe)
    except RecipeError as exc:
        raise CliError(str(exc)) from None
    student_src = _plan_source(args.model, recipe.model.init, "--model", "model.init")
    teacher_src = ""
    if args.teacher is not None or recipe.objective == "distill":
        teacher_src = _plan_source(args.teacher, recipe.distill.teacher, "--teacher",
                                   "distill.teacher")
    from dataclasses import replace

    from wamdiff2_core.training.memory import (GIB, PlanSetup, auto_strategy, format_plan,
                                               load_shape, plan, plan_dict, teacher_placement,
                                               workload_for)

    student = load_shape(student_src)
    teacher = load_shape(teacher_src) if teacher_src else None
    device = int(args.gpu_memory * GIB)
    strategy = args.strategy or recipe.train.strategy
    gpu = not args.cpu
    if strategy == "auto":
        strategy, _ = auto_strategy(recipe, student, teacher, args.gpus, gpu, device)
    setup = PlanSetup(strategy, args.gpus, 0, gpu, recipe.train.precision,
                      recipe.train.micro_batch, teacher_placement(recipe, strategy))
    setup = replace(setup, teacher_placement=args.teacher_placement or setup.teacher_placement)
    work = workload_for(recipe, student, setup, args.tokens, args.images, args.image_pixels)
    result = plan(student, teacher, setup, work)
    print(json.dumps(plan_dict(result, device), indent=1) if args.json
          else format_plan(result, device))
    return 0


# What a plan may be asked about: physical sense, not today's hardware (a sample of a
# million tokens, 256 images, an image of the image reader's pixel limit, 64 Ki processes,
# a GPU of 4 TiB).
PLAN_LIMITS = {"gpus": (1, 1 << 16), "tokens": (0, 1 << 20), "images": (0, 256),
               "image_pixels": (0, 40_000_000), "gpu_memory": (1e-3, 4096.0)}


def _check_plan_numbers(args) -> None:
    """One CliError for a memory-plan number outside ``PLAN_LIMITS`` (negative images,
    pixels or tokens planned nonsense that 'fit')."""
    for key, (low, high) in PLAN_LIMITS.items():
        value = getattr(args, key)
        if not low <= value <= high:          # NaN fails too
            raise CliError(f"--{key.replace('_', '-')} must be in [{low:g}, {high:g}], got "
                           f"{value:g}{' (0: the default)' if low == 0 else ''}")


def _plan_source(given: str | None, recipe_value: str, option: str, key: str) -> str:
    """The model source a plan reads: ``given`` or the recipe's, which must be a preset or
    a checkpoint directory here (never a name to look up on a model hub: the plan reads
    config files only, offline). CliError naming the option otherwise."""
    from wamdiff2_core.model.presets import PRESETS, is_preset

    if given is not None and not given.strip():
        raise CliError(f"{option} is empty: give a preset ({', '.join(sorted(PRESETS))}) or a "
                       f"checkpoint directory")
    source = given if given is not None else recipe_value
    where = option if given is not None else f"the recipe's {key}"
    if not source:
        raise CliError(f"{option} is not given and {where} is empty: give a preset "
                       f"({', '.join(sorted(PRESETS))}) or a checkpoint directory")
    if is_preset(source):
        return source
    try:
        is_dir = os.path.isdir(source)
    except (OSError, ValueError):
        is_dir = False
    if not is_dir:
        raise CliError(f"{where} {source[:200]!r} is neither a preset "
                       f"({', '.join(sorted(PRESETS))}) nor a checkpoint directory (names "
                       f"are not looked up on a model hub)")
    check_model_source(source)
    return source


def _pipeline(args) -> int:
    check_output(args.out, "--out", folder=True)
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.training.config import RecipeError
    from wamdiff2_core.training.engine import TrainingError
    from wamdiff2_core.training.pipeline import run_pipeline

    if not 0 < args.steps_scale < float("inf"):
        raise CliError(f"--steps-scale must be a finite number > 0, got {args.steps_scale}")
    try:
        run_pipeline(args.preset, args.data, args.out, args.plan, args.overrides,
                     args.steps_scale, args.resume)
    except (RecipeError, CheckpointError, TrainingError) as exc:
        raise CliError(str(exc)) from None
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="run one training recipe (stage 0, I, II or III)",
        description="Run one training recipe. key=value arguments override recipe keys "
                    "(dotted, e.g. optim.lr=1e-4 data.path=DIR); unknown keys are an error.")
    p.add_argument("--config", required=True, metavar="FILE",
                   help="recipe YAML (a path, or a shipped name such as block32.yaml)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest complete checkpoint in output.dir")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.set_defaults(func=_train)

    q = subparsers.add_parser(
        "pipeline", help="run stage 0 -> I -> II -> III for a preset",
        description="Run the whole conversion (config/training/pipeline.yaml): AR "
                    "fine-tuning, block 4 -> 8 -> 16 -> 32, block-wise and cross-scale "
                    "distillation. The final model is written to OUT/final.")
    q.add_argument("--preset", required=True, help="student preset (e.g. tiny) or checkpoint")
    q.add_argument("--data", required=True, metavar="DIR", help="training data set directory")
    q.add_argument("--out", required=True, metavar="DIR", help="output directory")
    q.add_argument("--plan", default="pipeline.yaml", metavar="FILE",
                   help="pipeline YAML (default: the shipped pipeline.yaml)")
    q.add_argument("--steps-scale", type=float, default=1.0,
                   help="multiply every stage's step count (e.g. 0.01 for a smoke run)")
    q.add_argument("--resume", action="store_true",
                   help="skip finished stages and resume an interrupted one")
    q.add_argument("overrides", nargs="*", metavar="key=value",
                   help="recipe overrides applied to every stage")
    q.set_defaults(func=_pipeline)

    e = subparsers.add_parser(
        "export", help="write the planner-loadable model of a training checkpoint",
        description="Consolidate a training checkpoint's shards (any number of processes "
                    "wrote them) into a Hugging Face directory that Planner.from_pretrained "
                    "and model.init load: safetensors weights, config, tokenizer and "
                    "processor. One process, host memory only.")
    e.add_argument("checkpoint", metavar="CKPT",
                   help="a checkpoint directory (OUT/checkpoints/step-N) or a run's output.dir "
                        "(its newest complete checkpoint)")
    e.add_argument("out", metavar="OUT", help="a new (or empty) directory")
    e.set_defaults(func=_export)

    m = subparsers.add_parser(
        "memory-plan", help="per-GPU memory of a training recipe before booking GPUs",
        description="Print per-process bytes of parameters, gradients and AdamW state "
                    "(exact), the teacher, transient buffers and activations per micro-batch "
                    "with and without activation checkpointing (an estimate), and whether "
                    "they fit a GPU. key=value arguments override recipe keys.")
    m.add_argument("--config", required=True, metavar="FILE",
                   help="recipe YAML (a path, or a shipped name such as distill_cross.yaml)")
    m.add_argument("--model", metavar="SRC", default=None,
                   help="student shape: a preset (qwen3-vl-2b, qwen3-vl-8b, tiny, small) or a "
                        "checkpoint directory (default: the recipe's model.init)")
    m.add_argument("--teacher", metavar="SRC", default=None,
                   help="teacher shape (default: the recipe's distill.teacher for distill "
                        "recipes)")
    m.add_argument("--gpus", type=int, required=True, metavar="N",
                   help="processes in all (nodes x GPUs per node)")
    m.add_argument("--gpu-memory", type=float, default=80.0, metavar="GIB",
                   help="memory of one GPU in GiB (default 80)")
    m.add_argument("--strategy", choices=("auto", "none", "ddp", "fsdp"), default="",
                   help="default: the recipe's train.strategy")
    m.add_argument("--teacher-placement", choices=("sharded", "replicated"), default="",
                   help="default: the recipe's distill.teacher_placement")
    m.add_argument("--tokens", type=int, default=0, metavar="N",
                   help="text tokens per sample (default: a 64-token prompt, the images' "
                        "tokens and the recipe's answer layout)")
    m.add_argument("--images", type=int, default=1, metavar="N", help="images per sample")
    m.add_argument("--image-pixels", type=int, default=0, metavar="P",
                   help="pixels per image after resizing (default: the model's budget)")
    m.add_argument("--cpu", action="store_true", help="plan for CPU processes (fp32 FSDP)")
    m.add_argument("--json", action="store_true", help="print the plan as JSON (bytes)")
    m.add_argument("overrides", nargs="*", metavar="key=value")
    m.set_defaults(func=_memory_plan)
