"""``wamdiff2 data generate`` and ``wamdiff2 eval closed-loop`` (thin: parse -> config -> call).

The ``eval`` group is shared with ``wamdiff2_core.evaluation.cli`` (``eval open-loop``):
both get it from :func:`add_eval_group`, which creates it once per top-level parser.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

from wamdiff2_core.decoding.config import COMMIT_RULES

DEFAULT_EVAL_OUT = "runs/eval/closed-loop"
DEFAULT_EVAL_SEED = 1000    # not the data generator's default: evaluate on unseen episodes


def add_eval_group(subparsers):
    """The ``eval`` sub-subparsers, created on first use and memoised on ``subparsers``
    (attribute ``_wamdiff2_eval``), so that several modules can add ``eval`` commands."""
    from wamdiff2_core.cli import subgroup

    return subgroup(subparsers, "eval", help="evaluate a planner (open loop, closed loop)")


def register(subparsers) -> None:
    from wamdiff2_core.cli import subgroup

    data = subgroup(subparsers, "data", help="generate training / evaluation data")
    gen = data.add_parser(
        "generate", help="simulate episodes and write images + conversation records",
        description="Drive the expert through simulated episodes (highway-env), render the "
                    "front camera (Panda3D, offscreen) and write DIR/images/*.png, "
                    "DIR/camera.json and DIR/train.json (reference conversation format, "
                    "one record per task per frame). Same arguments, same bytes.")
    gen.add_argument("--out", required=True, metavar="DIR", help="output directory")
    gen.add_argument("--episodes", type=int, required=True, metavar="N")
    gen.add_argument("--seed", type=int, default=0, metavar="S", help="run seed (default 0)")
    gen.add_argument("--tasks", default="planning,detection,qa",
                     help="comma-separated subset of planning,detection,qa (default: all)")
    gen.add_argument("--scenarios", default="all",
                     help="comma-separated scenario families, cycled over episodes "
                          "(highway,intersection,racetrack; default: all)")
    gen.add_argument("--resolution", default="320x180", metavar="WxH",
                     help="camera resolution (default 320x180)")
    gen.add_argument("--hfov", type=float, default=80.0, metavar="DEG",
                     help="horizontal field of view in degrees (default 80)")
    gen.add_argument("--frames", type=int, default=20, metavar="N",
                     help="frames per episode, one every 0.5 s (default 20)")
    gen.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in DIR (same arguments)")
    gen.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    gen.add_argument("--no-progress", action="store_true", help="no progress bar")
    gen.set_defaults(func=run_generate)

    group = add_eval_group(subparsers)
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
    closed.add_argument("--seed", type=int, default=DEFAULT_EVAL_SEED, metavar="S",
                        help=f"run seed (default {DEFAULT_EVAL_SEED})")
    closed.add_argument("--scenarios", default="all",
                        help="comma-separated scenario families, cycled over episodes")
    closed.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                        help="episode length (default: each scenario's own)")
    closed.add_argument("--resolution", default="320x180", metavar="WxH",
                        help="camera resolution given to the planner (default 320x180)")
    closed.add_argument("--out", default=DEFAULT_EVAL_OUT, metavar="DIR",
                        help=f"report directory (default {DEFAULT_EVAL_OUT})")
    closed.add_argument("--max-plots", type=int, default=12, metavar="N",
                        help="plot at most N episodes (default 12)")
    closed.add_argument("--commit-rule", default=None, choices=COMMIT_RULES,
                        help="checkpoint planners: commit rule (default "
                             "low_confidence_dynamic)")
    closed.add_argument("--threshold", type=float, default=None,
                        help="checkpoint planners: confidence threshold (default 0.9)")
    closed.add_argument("--steps-per-block", type=int, default=None,
                        help="checkpoint planners: denoising step budget per block "
                             "(default: the block size)")
    closed.add_argument("--json", action="store_true",
                        help="print the JSON report on stdout instead of the text summary")
    closed.add_argument("--no-progress", action="store_true", help="no progress bar")
    closed.set_defaults(func=run_closed_loop_cli)


def _camera(resolution: str, hfov: float = 80.0):
    from wamdiff2_core.cli import CliError
    from wamdiff2_core.sim.camera import CameraConfig, parse_resolution

    try:
        width, height = parse_resolution(resolution)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not 10.0 <= hfov <= 170.0:
        raise CliError(f"--hfov must be between 10 and 170 degrees, got {hfov}")
    return CameraConfig(width=width, height=height, hfov_deg=hfov)


def _scenarios(text: str) -> tuple[str, ...]:
    from wamdiff2_core.cli import CliError
    from wamdiff2_core.sim.scenarios import parse_scenarios

    try:
        return parse_scenarios(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def run_generate(args) -> int:
    from wamdiff2_core.cli import CliError
    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, GeneratorError, generate

    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    try:
        config = GeneratorConfig(
            episodes=args.episodes, seed=args.seed, tasks=tasks,
            scenarios=_scenarios(args.scenarios),
            episode=EpisodeConfig(frames=args.frames,
                                  camera=_camera(args.resolution, args.hfov)))
        summary = generate(args.out, config, resume=args.resume,
                           progress=not args.no_progress)
    except (ValueError, GeneratorError) as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(asdict(summary), indent=1, sort_keys=True))
    else:
        records = ", ".join(f"{n} {task}" for task, n in summary.records.items())
        print(f"wrote {summary.frames} frames ({records} records) from {summary.episodes} "
              f"episodes to {summary.out} in {summary.seconds:.1f} s")
    return 0


def run_closed_loop_cli(args) -> int:
    from wamdiff2_core.cli import CliError, decode_config
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
    from wamdiff2_core.sim.planners import make_planner
    from wamdiff2_core.sim.report import build_report, format_text, write_report

    if args.episodes < 1:
        raise CliError("--episodes must be at least 1")
    if args.duration is not None and args.duration <= 0:
        raise CliError("--duration must be positive")
    config = ClosedLoopConfig(episodes=args.episodes, seed=args.seed,
                              scenarios=_scenarios(args.scenarios), duration_s=args.duration,
                              camera=_camera(args.resolution))
    knobs = {"commit_rule": args.commit_rule, "threshold": args.threshold,
             "steps_per_block": args.steps_per_block}
    decode = decode_config(**knobs) if any(v is not None for v in knobs.values()) else None
    try:
        planner = make_planner(args.planner, decode)
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise CliError(f"cannot load planner {args.planner!r}: {exc}") from None
    start = time.perf_counter()
    results = run_closed_loop(planner, config, progress=not args.no_progress)
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
