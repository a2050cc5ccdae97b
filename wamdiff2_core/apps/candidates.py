"""``wamdiff2 candidates collect`` and ``wamdiff2 candidates fit``: the learned candidate
scorer's training data and its fit (thin: parse -> config -> call -> report).

collect drives simulated episodes with a checkpoint's candidates and writes every frame's
candidates with their run-time features and privileged outcomes (JSON Lines); fit turns
one or more such files into a weights file, after judging the fit on episodes it did not
see (cross-validation by episode). docs/candidates.md has the recipe the bundled model's
weights come from.
"""
from __future__ import annotations

import argparse
import json
import sys

from wamdiff2_core.apps.candidate_options import add_candidate_options, candidate_config
from wamdiff2_core.apps.common import CliError, scenarios_arg, subgroup
from wamdiff2_core.apps.outputs import check_output
from wamdiff2_core.candidates.config import CHOICES


def register(subparsers) -> None:
    group = subgroup(subparsers, "candidates")
    collect = group.add_parser(
        "collect", help="label simulated frames' candidate plans for the learned scorer",
        description="Drive closed-loop episodes with a checkpoint's K candidates per frame "
                    "and write each frame's candidates, their run-time features and their "
                    "privileged outcome (following each for 4 s in a copy of the world) "
                    "as JSON Lines.")
    collect.add_argument("--checkpoint", required=True, help="checkpoint directory")
    collect.add_argument("--episodes", type=int, default=6, metavar="N")
    collect.add_argument("--seed", type=int, required=True, metavar="S",
                         help="closed-loop run seed (tune and judge on different seeds)")
    collect.add_argument("--scenarios", default="all",
                         help="comma-separated scenario families, cycled over episodes")
    collect.add_argument("--follow", default="greedy", choices=CHOICES,
                         help="whose choice the ego drives: greedy (row 0, the plan without "
                              "candidates; default), oracle, or the planner's scorer")
    collect.add_argument("--out", required=True, metavar="FILE", help="frames file (.jsonl)")
    collect.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_candidate_options(collect, default_k=8)
    collect.set_defaults(func=run_collect)

    fit = group.add_parser(
        "fit", help="fit the learned candidate scorer on collected frames",
        description="Fit the learned scorer (ridge regression of each frame's privileged "
                    "scores on the candidates' run-time features, centred per frame), "
                    "print its cross-validated choice against the greedy and the best "
                    "candidate, and write the weights.")
    fit.add_argument("--data", required=True, nargs="+", metavar="FILE",
                     help="frames files of `candidates collect`")
    fit.add_argument("--out", required=True, metavar="FILE", help="weights file (.json)")
    fit.add_argument("--ridge", type=float, default=10.0, help="ridge penalty (default 10)")
    fit.add_argument("--folds", type=int, default=3,
                     help="cross-validation folds, by episode (default 3)")
    fit.add_argument("--greedy-bonus", type=float, default=0.0, metavar="B",
                     help="added to the greedy plan's score (row 0): another candidate must "
                          "beat it by B; chosen on closed-loop runs of the tuning seeds "
                          "(default 0)")
    fit.set_defaults(func=run_fit)


def run_collect(args: argparse.Namespace) -> int:
    from wamdiff2_core.apps.common import check_model_source

    check_output(args.out, "--out", folder=False)
    config = candidate_config(args)
    if not config.enabled:
        raise CliError("collecting candidates needs --candidates 2 or more")
    if args.episodes < 1:
        raise CliError("--episodes must be at least 1")
    check_model_source(args.checkpoint)
    from wamdiff2_core.planner import Planner, PlannerConfig
    from wamdiff2_core.sim.candidate_data import collect_frames
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig

    sim = ClosedLoopConfig(episodes=args.episodes, seed=args.seed,
                           scenarios=scenarios_arg(args.scenarios))
    try:
        planner = Planner.from_pretrained(args.checkpoint, PlannerConfig(
            candidates=config, scorer_weights=args.scorer_weights))
    except ValueError as exc:               # CheckpointError, CandidateConfigError
        raise CliError(str(exc)) from None
    summary = collect_frames(planner, sim, args.out, args.follow,
                             {"checkpoint": args.checkpoint, "k": config.k,
                              "diversity": config.diversity,
                              "temperature": config.temperature},
                             progress=not args.no_progress)
    print(json.dumps(summary, indent=1))
    return 0


def run_fit(args: argparse.Namespace) -> int:
    from wamdiff2_core.candidates.dataset import (FramesError, cross_validate, fit_frames,
                                                  read_frames)

    check_output(args.out, "--out", folder=False)
    if args.ridge < 0:
        raise CliError("--ridge must not be negative")
    try:
        frames = read_frames(args.data)
        judged = cross_validate(frames, args.ridge, args.folds, args.greedy_bonus)
    except (FramesError, ValueError) as exc:
        raise CliError(str(exc)) from None
    scorer = fit_frames(frames, args.ridge, {"data": [str(p) for p in args.data],
                                             "cross_validation": judged}, args.greedy_bonus)
    scorer.save(args.out)
    print(json.dumps(judged))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
