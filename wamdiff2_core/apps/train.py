"""`wamdiff2 train` and `wamdiff2 pipeline` (thin: parse -> recipe -> run).

Several processes: ``torchrun --nproc_per_node N -m wamdiff2_core.cli train --config ...``.
"""
from __future__ import annotations

from wamdiff2_core.apps.common import CliError


def _train(args) -> int:
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.training.config import RecipeError, find_recipe, load_recipe
    from wamdiff2_core.training.distributed import close_process_group
    from wamdiff2_core.training.engine import train

    try:
        recipe = load_recipe(find_recipe(args.config), args.overrides)
        train(recipe, resume=args.resume)
    except (RecipeError, CheckpointError) as exc:
        raise CliError(str(exc)) from None
    finally:
        close_process_group()
    return 0


def _pipeline(args) -> int:
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.training.config import RecipeError
    from wamdiff2_core.training.pipeline import run_pipeline

    if args.steps_scale <= 0:
        raise CliError("--steps-scale must be > 0")
    try:
        run_pipeline(args.preset, args.data, args.out, args.plan, args.overrides,
                     args.steps_scale, args.resume)
    except (RecipeError, CheckpointError) as exc:
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
