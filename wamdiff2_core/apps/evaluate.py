"""``wamdiff2 eval open-loop`` and ``wamdiff2 eval closed-loop`` (thin: parse -> config ->
call -> report).

Open loop scores a checkpoint on a data set's records (``--checkpoint ground-truth`` answers
with the records' own answers, ``constant-velocity`` plans straight ahead at the prompt's
speed: no model); closed loop lets a planner drive simulated episodes. Where the closed
loop's plans come from is a :class:`ClosedLoopDriver`: the planner in this process by
default; the ROS tools add ``--through-node`` (``wamdiff2_ros.tools.closed_loop_cli``),
which sets another driver on the same parser, so this module never imports them.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from wamdiff2_core.apps.candidate_options import add_candidate_options, candidate_settings
from wamdiff2_core.apps.common import (CAMERAS_HELP, CliError, add_decode_options,
                                       add_exact_options, add_field_options,
                                       check_model_source, decode_config, decode_knobs,
                                       field_overrides, planner_config, rig_arg,
                                       scenarios_arg, subgroup)
from wamdiff2_core.apps.outputs import check_output
from wamdiff2_core.apps.predict import (add_image_root_option, add_predict_options, announce,
                                        predict_settings, predict_to, read_input)
from wamdiff2_core.candidates.config import CHOICES
from wamdiff2_core.tasks import RECORDS_FILE

DEFAULT_OUT = "runs/eval/open-loop"
DEFAULT_CLOSED_OUT = "runs/eval/closed-loop"
DEFAULT_CLOSED_SEED = 1000  # not the data generator's default: evaluate on unseen episodes
CLOSED_LOOP_COMMAND = ("eval", "closed-loop")


@dataclass(frozen=True)
class ClosedLoopDriver:
    """Where `eval closed-loop` gets its plans: ``drive(args, config)`` runs the episodes of
    a ``ClosedLoopConfig`` and returns ``(results, report extras)``; ``default_time`` is
    the time mode when ``--time`` is not given."""

    name: str
    default_time: str
    drive: Callable[[argparse.Namespace, Any], tuple[list, dict]]


def register(subparsers) -> None:
    group = subgroup(subparsers, "eval")
    _register_open_loop(group)
    _register_closed_loop(group)


# ------------------------------------------------------------------------------ open loop
def _register_open_loop(group) -> None:
    parser = group.add_parser(
        "open-loop", help="L2, collisions, detection mAP and QA accuracy on recorded samples",
        description="Score a checkpoint on a data set's records: L2 per waypoint and at "
                    "1/2/3 s, collision rate, detection mAP/AP50, QA exact match, parse "
                    "failures. Writes open_loop.json, open_loop.txt and PNG plots to --out.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint",
                        help="checkpoint directory, preset name (e.g. tiny), "
                             "'ground-truth' to answer with the recorded answers, or "
                             "'constant-velocity' to plan straight ahead at each planning "
                             "prompt's speed (planning records only: the baseline); a "
                             "model's answers are decoded as `wamdiff2 predict` decodes "
                             "them (batched, on every torchrun process) into "
                             "OUT/predictions.json")
    source.add_argument("--predictions", metavar="FILE", nargs="+",
                        help="score this predictions file (`wamdiff2 predict`'s or the "
                             "reference's inference script's: its merged file, or its "
                             "per-rank files NAME_rank0.json ... together) instead of decoding")
    parser.add_argument("--data",
                        help=f"data set directory (reads {RECORDS_FILE}) or a records file "
                             "(.json list or .jsonl) (needed with --checkpoint; with "
                             "--predictions, the records the predictions are joined to by id: "
                             "without it, each prediction's own ground truth is scored); a "
                             "bad record is counted as a failure, not a stop")
    add_image_root_option(parser, "--data (and of --predictions' detection items)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"report directory (default: {DEFAULT_OUT})")
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report on stdout instead of the text summary")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="evaluate only the first N records (after --tasks)")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated tasks to evaluate (default: all)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    add_decode_options(parser, ("block_size", "steps_per_block", "max_new_tokens",
                                "commit_rule", "threshold", "constrained", "mode"))
    add_exact_options(parser)
    add_field_options(parser)
    add_predict_options(parser)
    add_candidate_options(parser)
    parser.set_defaults(func=run_open_loop)


def load_records(data: str, image_root: str | None = None):
    """The records of ``--data`` and where their images are (``tasks.inputs``: the rule
    `predict` follows); a bad record is not refused here, it fails alone when scored."""
    return read_input(data, image_root, "--data")


def _task_of(record) -> str | None:
    """A record's task for --tasks; None for a record that has none or is malformed."""
    from wamdiff2_core.evaluation.truth import record_truth

    try:
        return record_truth(record)[0]
    except ValueError:
        return None


def _tasks(args: argparse.Namespace) -> str | None:
    """--tasks, where the constant-velocity baseline (which plans, and answers nothing
    else) makes it planning."""
    from wamdiff2_core.evaluation.predictors import CONSTANT_VELOCITY

    if getattr(args, "checkpoint", None) != CONSTANT_VELOCITY:
        return args.tasks
    wanted = {t.strip() for t in (args.tasks or "planning").split(",") if t.strip()}
    if wanted != {"planning"}:
        raise CliError(f"--checkpoint {CONSTANT_VELOCITY} answers planning records only; "
                       f"drop --tasks {args.tasks}")
    return "planning"


def _select(records: list, tasks: str | None, limit: int | None) -> list[int]:
    """The positions of the records --tasks and --limit keep."""
    from wamdiff2_core.evaluation.scorers import SCORERS

    kept = list(range(len(records)))
    if tasks:
        wanted = {t.strip() for t in tasks.split(",") if t.strip()}
        unknown = wanted - set(SCORERS)
        if unknown:
            raise CliError(f"unknown task(s) {sorted(unknown)}; known: {sorted(SCORERS)}")
        kept = [i for i in kept if _task_of(records[i]) in wanted]
    if limit is not None:
        if limit < 1:
            raise CliError("--limit must be at least 1")
        kept = kept[:limit]
    return kept


def _predictor(args: argparse.Namespace):
    """The planner (None for the model-free answers) and provenance for ``--checkpoint``."""
    from wamdiff2_core.evaluation.predictors import MODEL_FREE

    decode = decode_config(args)           # checked first, also for model-free answers
    config = planner_config(args, decode, **candidate_settings(args))
    if args.checkpoint in MODEL_FREE:
        return None, {"checkpoint": args.checkpoint}
    check_model_source(args.checkpoint)
    from wamdiff2_core.planner import Planner

    try:
        planner = Planner.from_pretrained(args.checkpoint, config, device=args.device,
                                          fields=field_overrides(args))
    except ValueError as exc:          # CheckpointError, CandidateConfigError
        raise CliError(str(exc)) from None
    info = {"checkpoint": args.checkpoint, "device": args.device, "decode": decode.to_dict()}
    if planner.picker is not None:
        info["candidates"] = planner.picker.describe()
    return planner, info


def _decoded(args: argparse.Namespace, records: list, image_root: Path):
    """The report of ``--checkpoint``'s answers (the model-free ones in this process, a
    model's through `predict` into OUT/predictions.json) and predict's summary (None for the
    model-free ones); (None, None) on the ranks other than 0."""
    from wamdiff2_core.evaluation.open_loop import evaluate_open_loop, score_predictions
    from wamdiff2_core.evaluation.predict_run import join_ranks
    from wamdiff2_core.evaluation.predictions import read_predictions
    from wamdiff2_core.evaluation.predictors import MODEL_FREE
    from wamdiff2_core.training.distributed import close_process_group

    settings = predict_settings(args)
    if args.checkpoint in MODEL_FREE:
        _, info = _predictor(args)
        report = evaluate_open_loop(records, MODEL_FREE[args.checkpoint](), image_root,
                                    progress=settings.progress)
        return dataclasses.replace(report, info={**info, "data": str(args.data)}), None
    output = Path(args.out) / "predictions.json"
    ctx, args.device = join_ranks(args.device)
    try:
        planner, info = _predictor(args)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        summary = predict_to(args, settings, planner, ctx, records, image_root, output)
    finally:
        close_process_group()
    if summary is None:
        return None, None
    try:
        items = read_predictions(output)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    report = score_predictions(records, items, image_root)
    return dataclasses.replace(report, info={**info, "data": str(args.data),
                                             "predictions": str(output),
                                             "predict": summary.to_dict()}), summary


def _scored_file(args: argparse.Namespace):
    """The report of predictions files: joined to ``--data``'s records by id, or scored on
    each prediction's own ground truth."""
    from wamdiff2_core.evaluation.open_loop import score_predictions
    from wamdiff2_core.evaluation.predictions import item_record, match, read_predictions

    source = ", ".join(map(str, args.predictions))
    try:
        items = read_predictions(args.predictions)
        if args.data:
            data = load_records(args.data, args.image_root)
            announce("wamdiff2 eval", data.image_root)
            kept = _select(data.records, args.tasks, args.limit)
            records = [data.records[i] for i in kept]
            items = match(records, items, source, kept)
            image_root = data.image_root.path
        else:
            records = [item_record(item) for item in items]
            kept = _select(records, args.tasks, args.limit)
            records, items = [records[i] for i in kept], [items[i] for i in kept]
            image_root = Path(args.image_root or Path.cwd())
        report = score_predictions(records, items, image_root)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return dataclasses.replace(report, info={"predictions": source, "data": args.data,
                                             "image_root": str(image_root)})


def run_open_loop(args: argparse.Namespace) -> int:
    from wamdiff2_core.evaluation.open_loop_report import format_summary, write_report

    check_output(args.out, "--out", folder=True)
    if args.image_root is not None and not Path(args.image_root).is_dir():
        raise CliError(f"--image-root {args.image_root} is not a folder")
    summary = None
    if args.predictions:
        report = _scored_file(args)
    elif not args.data:
        raise CliError("--checkpoint needs --data (the records to answer)")
    else:
        data = load_records(args.data, args.image_root)
        announce("wamdiff2 eval", data.image_root)
        records = [data.records[i] for i in _select(data.records, _tasks(args), args.limit)]
        report, summary = _decoded(args, records, data.image_root.path)
        if report is None:                           # a torchrun rank other than 0
            return 0
    paths = write_report(report, args.out)
    print(report.to_json() if args.json else format_summary(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    _print_failures(report)
    if summary is not None and summary.all_failed and not summary.answered:
        # no record reached the model (records or images unusable): the report measures
        # nothing; a model whose answers all fail is a result, and exits 0
        print(f"wamdiff2 eval: every record failed before decoding; "
              f"{summary.failure_line()}", file=sys.stderr)
        return 1
    if any(report.failures.values()) and not any(
            metrics.get("num_records") for metrics in report.tasks.values()):
        # every record or item failed before a scorer took it: nothing was measured
        print("wamdiff2 eval: every record failed; nothing was scored", file=sys.stderr)
        return 1
    return 0


def _print_failures(report) -> None:
    """How many records failed, by task, and the first (stderr)."""
    counts = {task: n for task, n in report.failures.items() if n}
    if counts:
        print(f"wamdiff2 eval: {sum(counts.values())} record(s) failed ("
              + ", ".join(f"{task} {n}" for task, n in counts.items())
              + f"); the first: {report.first_failure}", file=sys.stderr)


# ------------------------------------------------------------------------------ closed loop
def _register_closed_loop(group) -> None:
    closed = group.add_parser(
        "closed-loop", help="let a planner drive simulated episodes; NAVSIM-PDMS-style score",
        description="The planner drives (waypoints -> pure pursuit + speed control -> "
                    "highway-env continuous action) for N episodes; each is scored "
                    "NC x DAC x (5 EP + 5 TTC + 2 C) / 12 per 4 s window (see "
                    "docs/simulation.md). Writes closed_loop.json, closed_loop.txt and "
                    "PNG plots (top-down trajectories) to --out.")
    closed.add_argument("--planner", required=True,
                        help="expert | constant-velocity | checkpoint:DIR (a checkpoint "
                             "directory or a preset name such as tiny)")
    closed.add_argument("--episodes", type=int, default=6, metavar="N")
    closed.add_argument("--seed", type=int, default=DEFAULT_CLOSED_SEED, metavar="S",
                        help=f"run seed (default {DEFAULT_CLOSED_SEED})")
    closed.add_argument("--scenarios", default="all",
                        help="comma-separated scenario families, cycled over episodes")
    closed.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                        help="episode length (default: each scenario's own)")
    closed.add_argument("--resolution", default="320x180", metavar="WxH",
                        help="camera resolution given to the planner (default 320x180)")
    closed.add_argument("--cameras", metavar="RIG",
                        help=CAMERAS_HELP + "; a checkpoint planner must have been trained "
                             "with the same cameras")
    closed.add_argument("--out", default=DEFAULT_CLOSED_OUT, metavar="DIR",
                        help=f"report directory (default {DEFAULT_CLOSED_OUT})")
    closed.add_argument("--max-plots", type=int, default=12, metavar="N",
                        help="plot at most N episodes (default 12)")
    add_decode_options(closed, ("commit_rule", "threshold", "steps_per_block", "constrained",
                                "mode"))
    closed.add_argument("--time", default=None, metavar="MODE",
                        help="how simulated time relates to planning: sync (the world waits "
                             "for every plan; the default in this process) | latency-model "
                             "(each plan arrives after the modelled latency of its decode) | "
                             "realtime (the world moves on while the planner plans; needs "
                             "--through-node, whose default it is); docs/simulation.md")
    closed.add_argument("--latency", default=None, metavar="MODEL",
                        help="latency model of --time latency-model: h200 (default: the 2B "
                             "model's per-forward costs on an H200, docs/gpu) | fixed:MS | "
                             "profile:PATH[@MODE] (a bench decode --json report); a :ar "
                             "suffix prices every decode as autoregressive (one AR step "
                             "per token)")
    closed.add_argument("--camera-rate", type=float, default=2.0, metavar="HZ",
                        help="camera frames (plan requests) per second of simulated time; it "
                             "must divide the 10 Hz control rate (default 2)")
    closed.add_argument("--answer-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="a planner that gives no answer for this long (simulated time "
                             "in realtime, else wall time) ends the episode as a failure "
                             "(default 10)")
    closed.add_argument("--cold-start", action="store_true",
                        help="latency-model and realtime: do not wait for each episode's "
                             "first plan (the ego brakes until it arrives); by default an "
                             "episode starts as if the planner had been running before it")
    closed.add_argument("--json", action="store_true",
                        help="print the JSON report on stdout instead of the text summary")
    closed.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_candidate_options(closed)
    closed.add_argument("--candidate-choice", default="scorer", choices=CHOICES,
                        help="with --candidates K > 1, whose choice the ego drives: the "
                             "planner's scorer (default), or, to report only, the oracle "
                             "(the best candidate by the privileged score of following it "
                             "4 s in a copy of the world: the ceiling a scorer can reach) "
                             "or greedy (row 0, the plan without candidates)")
    closed.add_argument("--label-candidates", action="store_true",
                        help="score every frame's candidates with the oracle too and report "
                             "the privileged score of the chosen, greedy and best ones")
    closed.add_argument("--workers", type=int, default=None, metavar="N",
                        help="run the episodes on N processes, each planning on one thread; "
                             "an episode's result does not depend on N (default: the cores; "
                             "the in-process planner only: --through-node refuses N > 1)")
    closed.set_defaults(func=run_closed_loop, closed_loop_driver=IN_PROCESS)


def _drive_in_process(args: argparse.Namespace, config) -> tuple[list, dict]:
    """The planner in this process (``--planner`` any kind)."""
    from wamdiff2_core.sim.episode_pool import PlannerRecipe

    if config.time_mode == "realtime":
        raise CliError("--time realtime needs a planner that runs on its own: add "
                       "--through-node (the ROS node plans while the world moves on)")
    decode = decode_config(args) if decode_knobs(args) else None   # checkpoint planners only
    candidates = candidate_settings(args)
    if candidates["candidates"].enabled:
        return _drive_candidates(args, config, decode, candidates)
    if args.candidate_choice != "scorer" or args.label_candidates:
        raise CliError("--candidate-choice and --label-candidates need --candidates 2 or more")
    return _drive_recipe(args, PlannerRecipe(args.planner, decode), config)[0], {}


def _drive_recipe(args: argparse.Namespace, recipe, config) -> tuple[list, object]:
    """The episodes of ``recipe`` over --workers processes (sim.episode_pool: the same
    results for any number) and its candidate log; a planner that cannot be built is one
    CliError."""
    from wamdiff2_core.sim.episode_pool import PlannerBuildError, default_workers, drive

    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise CliError(f"--workers must be at least 1, got {workers}")
    try:
        return drive(recipe, config, workers, progress=not args.no_progress)
    except PlannerBuildError as exc:
        raise CliError(str(exc)) from None


def _drive_candidates(args: argparse.Namespace, config, decode, candidates: dict
                      ) -> tuple[list, dict]:
    """A checkpoint planner with K > 1 candidates per frame; the report's ``candidates``
    says what was chosen (and, with the oracle, how that compares with the best)."""
    from wamdiff2_core.sim.episode_pool import PlannerRecipe

    name, _, path = args.planner.partition(":")
    if name != "checkpoint" or not path:
        raise CliError(f"--candidates applies to checkpoint planners, not {args.planner!r}")
    if config.time_mode != "sync" and (args.candidate_choice == "oracle"
                                       or args.label_candidates):
        raise CliError("the candidate oracle scores the world at each frame's instant: it "
                       "needs --time sync")
    recipe = PlannerRecipe(args.planner, decode, choice=args.candidate_choice,
                           label=args.label_candidates, **candidates)
    results, log = _drive_recipe(args, recipe, config)
    summary = {"k": candidates["candidates"].k, "scorer": candidates["candidates"].scorer,
               "diversity": candidates["candidates"].diversity,
               "temperature": candidates["candidates"].temperature,
               "choice": args.candidate_choice, **log.summary()}
    return results, {"candidates": summary}


IN_PROCESS = ClosedLoopDriver("in-process", "sync", _drive_in_process)


def closed_loop_config(args: argparse.Namespace):
    """The ``ClosedLoopConfig`` of `eval closed-loop`'s options; one CliError if invalid."""
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig

    if args.episodes < 1:
        raise CliError("--episodes must be at least 1")
    if args.duration is not None and args.duration <= 0:
        raise CliError("--duration must be positive")
    if not 0 < args.camera_rate <= 10:
        raise CliError(f"--camera-rate must be in (0, 10] Hz, got {args.camera_rate:g}")
    time_mode = args.time or args.closed_loop_driver.default_time
    latency = args.latency or ("h200" if time_mode == "latency-model" else "zero")
    if args.latency is not None and time_mode != "latency-model":
        raise CliError(f"--latency applies to --time latency-model, not {time_mode}")
    if latency.split(":")[0] not in ("zero", "fixed") and not args.planner.startswith(
            "checkpoint"):
        raise CliError(f"the latency model {latency} prices a model's decoding forwards; "
                       f"use --latency fixed:MS for planner {args.planner!r}")
    try:
        return ClosedLoopConfig(episodes=args.episodes, seed=args.seed,
                                scenarios=scenarios_arg(args.scenarios),
                                duration_s=args.duration,
                                camera=rig_arg(args.cameras, args.resolution),
                                replan_interval_s=round(1.0 / args.camera_rate, 6),
                                time_mode=time_mode, latency=latency,
                                answer_timeout_s=args.answer_timeout,
                                warm_start=not args.cold_start)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def run_closed_loop(args: argparse.Namespace) -> int:
    from wamdiff2_core.evaluation.closed_loop_report import build_report, format_text, write_report
    from wamdiff2_core.sim.latency import describe, parse_latency_model

    check_output(args.out, "--out", folder=True)
    config = closed_loop_config(args)
    decode = decode_config(args) if decode_knobs(args) else None
    driver = args.closed_loop_driver
    start = time.perf_counter()
    results, extras = driver.drive(args, config)
    report = build_report(results, args.planner, config, time.perf_counter() - start,
                          driver=driver.name,
                          latency_model=describe(parse_latency_model(config.latency)))
    report.update(extras)
    if decode is not None:
        report["decode"] = decode.to_dict()
    paths = write_report(args.out, results, report, max_plots=args.max_plots)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        sys.stdout.write(format_text(report))
        print(f"report: {paths[0]} (+ {len(paths) - 1} files)")
    return 0
