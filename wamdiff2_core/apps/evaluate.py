"""``wamdiff2 eval open-loop`` and ``wamdiff2 eval closed-loop`` (thin: parse -> config ->
call -> report).

Open loop scores a checkpoint on a data set's records (``--checkpoint ground-truth`` answers
with the records' own answers: no model); closed loop lets a planner drive simulated
episodes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from wamdiff2_core.apps.common import (CliError, add_decode_options, camera_arg, decode_config,
                                       decode_knobs, scenarios_arg, subgroup)
from wamdiff2_core.tasks import RECORDS_FILE

DEFAULT_OUT = "runs/eval/open-loop"
DEFAULT_CLOSED_OUT = "runs/eval/closed-loop"
DEFAULT_CLOSED_SEED = 1000  # not the data generator's default: evaluate on unseen episodes


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
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory, preset name (e.g. tiny), or "
                             "'ground-truth' to answer with the recorded answers")
    parser.add_argument("--data", required=True,
                        help=f"data set directory (reads {RECORDS_FILE}) or a records file "
                             "(.json list or .jsonl); image paths are relative to its folder")
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
                                "commit_rule", "threshold"))
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_open_loop)


def load_records(data: str) -> tuple[list[dict], object]:
    """Records of a data set directory or records file, and the folder images are under."""
    from wamdiff2_core.tasks import read_records, records_path

    try:
        path = records_path(data)
        return read_records(path), path.parent
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _select(records: list[dict], tasks: str | None, limit: int | None) -> list[dict]:
    from wamdiff2_core.evaluation.scorers import SCORERS

    if tasks:
        wanted = {t.strip() for t in tasks.split(",") if t.strip()}
        unknown = wanted - set(SCORERS)
        if unknown:
            raise CliError(f"unknown task(s) {sorted(unknown)}; known: {sorted(SCORERS)}")
        records = [r for r in records if r.get("task") in wanted]
    if limit is not None:
        if limit < 1:
            raise CliError("--limit must be at least 1")
        records = records[:limit]
    return records


def _predictor(args: argparse.Namespace):
    """The predict function and provenance for ``--checkpoint``."""
    from wamdiff2_core.evaluation.predictors import (GROUND_TRUTH, ground_truth_predictor,
                                                     planner_predictor)

    decode = decode_config(args)           # checked first, also for ground-truth answers
    if args.checkpoint == GROUND_TRUTH:
        return ground_truth_predictor(), {"checkpoint": GROUND_TRUTH}
    from wamdiff2_core.planner import Planner

    try:
        planner = Planner.from_pretrained(args.checkpoint, decode=decode, device=args.device)
    except ValueError as exc:          # CheckpointError: not a checkpoint, not a preset
        raise CliError(str(exc)) from None
    info = {"checkpoint": args.checkpoint, "device": args.device, "decode": decode.to_dict()}
    return planner_predictor(planner), info


def run_open_loop(args: argparse.Namespace) -> int:
    from wamdiff2_core.evaluation.open_loop import evaluate_open_loop
    from wamdiff2_core.evaluation.open_loop_report import format_summary, write_report

    records, image_root = load_records(args.data)
    records = _select(records, args.tasks, args.limit)
    predict, info = _predictor(args)
    report = evaluate_open_loop(records, predict, image_root, progress=not args.no_progress)
    report = dataclasses.replace(report, info={**info, "data": str(args.data)})
    paths = write_report(report, args.out)
    print(report.to_json() if args.json else format_summary(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


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
    closed.add_argument("--out", default=DEFAULT_CLOSED_OUT, metavar="DIR",
                        help=f"report directory (default {DEFAULT_CLOSED_OUT})")
    closed.add_argument("--max-plots", type=int, default=12, metavar="N",
                        help="plot at most N episodes (default 12)")
    add_decode_options(closed, ("commit_rule", "threshold", "steps_per_block"))
    closed.add_argument("--json", action="store_true",
                        help="print the JSON report on stdout instead of the text summary")
    closed.add_argument("--no-progress", action="store_true", help="no progress bar")
    closed.set_defaults(func=run_closed_loop)


def run_closed_loop(args: argparse.Namespace) -> int:
    from wamdiff2_core.evaluation.closed_loop_report import build_report, format_text, write_report
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig
    from wamdiff2_core.sim.closed_loop import run_closed_loop as drive
    from wamdiff2_core.sim.planners import make_planner

    if args.episodes < 1:
        raise CliError("--episodes must be at least 1")
    if args.duration is not None and args.duration <= 0:
        raise CliError("--duration must be positive")
    config = ClosedLoopConfig(episodes=args.episodes, seed=args.seed,
                              scenarios=scenarios_arg(args.scenarios), duration_s=args.duration,
                              camera=camera_arg(args.resolution))
    decode = decode_config(args) if decode_knobs(args) else None   # checkpoint planners only
    try:
        planner = make_planner(args.planner, decode)
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise CliError(f"cannot load planner {args.planner!r}: {exc}") from None
    start = time.perf_counter()
    results = drive(planner, config, progress=not args.no_progress)
    report = build_report(results, args.planner, config, time.perf_counter() - start)
    if decode is not None:
        report["decode"] = decode.to_dict()
    paths = write_report(args.out, results, report, max_plots=args.max_plots)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        sys.stdout.write(format_text(report))
        print(f"report: {paths[0]} (+ {len(paths) - 1} files)")
    return 0
