"""``wamdiff2 data generate``: simulated episodes -> images + conversation records;
``wamdiff2 data merge``: one records file over several data sets."""
from __future__ import annotations

import json
from dataclasses import asdict

from wamdiff2_core.apps.common import CAMERAS_HELP, CliError, rig_arg, scenarios_arg, subgroup
from wamdiff2_core.apps.outputs import check_output


def register(subparsers) -> None:
    data = subgroup(subparsers, "data")
    gen = data.add_parser(
        "generate", help="simulate episodes and write images + conversation records",
        description="Drive the expert (or, with --drive perturbed, a car pushed off the "
                    "expert's plan, for recovery data) through simulated episodes "
                    "(highway-env), render the "
                    "front camera or a camera rig (Panda3D, offscreen) and write "
                    "DIR/images/*.png, "
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
    gen.add_argument("--cameras", metavar="RIG", help=CAMERAS_HELP)
    gen.add_argument("--frames", type=int, default=20, metavar="N",
                     help="frames per episode, one every 0.5 s (default 20)")
    gen.add_argument("--drive", choices=("expert", "perturbed"), default="expert",
                     help="expert: the expert drives and its future is the label (default); "
                          "perturbed: recovery data, the car follows the expert's plan pushed "
                          "sideways and each frame's label is the expert's clean plan from "
                          "where the car is (docs/simulation.md)")
    gen.add_argument("--perturb-m", type=float, default=0.75, metavar="M",
                     help="perturbed drive: std of the sideways push in metres (default 0.75)")
    gen.add_argument("--perturb-p", type=float, default=0.5, metavar="P",
                     help="perturbed drive: probability that a plan is pushed (default 0.5)")
    gen.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in DIR (same arguments)")
    gen.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    gen.add_argument("--no-progress", action="store_true", help="no progress bar")
    gen.set_defaults(func=run_generate)
    merge = data.add_parser(
        "merge", help="one records file over several generated data sets",
        description="Write DIR/train.json with the records of every SRC (e.g. expert data "
                    "and --drive perturbed recovery data) for one training run over all of "
                    "them. Images stay in place (paths rewritten relative to DIR); ids get "
                    "the prefix s<k>_ (k: the SRC's place); the sources must share a camera.")
    merge.add_argument("--out", required=True, metavar="DIR", help="output directory")
    merge.add_argument("sources", nargs="+", metavar="SRC", help="finished data sets")
    merge.set_defaults(func=run_merge)


def run_merge(args) -> int:
    from wamdiff2_core.sim.generator import GeneratorError, merge

    check_output(args.out, "--out", folder=True)
    try:
        counts = merge(args.out, args.sources)
    except GeneratorError as exc:
        raise CliError(str(exc)) from None
    parts = ", ".join(f"{n} from {source}" for source, n in counts.items())
    print(f"wrote {sum(counts.values())} records ({parts}) to {args.out}")
    return 0


def run_generate(args) -> int:
    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, GeneratorError, generate

    check_output(args.out, "--out", folder=True)
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    try:
        config = GeneratorConfig(
            episodes=args.episodes, seed=args.seed, tasks=tasks,
            scenarios=scenarios_arg(args.scenarios),
            episode=EpisodeConfig(frames=args.frames,
                                  camera=rig_arg(args.cameras, args.resolution, args.hfov),
                                  drive=args.drive, perturb_m=args.perturb_m,
                                  perturb_p=args.perturb_p))
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
