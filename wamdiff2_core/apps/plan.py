"""`wamdiff2 plan`: eight waypoints for one camera image."""
from __future__ import annotations

import json

from wamdiff2_core import tasks
from wamdiff2_core.apps.candidate_options import add_candidate_options, candidate_settings
from wamdiff2_core.apps.common import (CliError, add_exact_options, add_model_arguments,
                                       planner_from_args)
from wamdiff2_core.types import Observation


def load_image(path: str):
    """The image at ``path``, decoded whole (a bomb or a truncated file: one CliError)."""
    from wamdiff2_core.image_files import ImageFileError, open_rgb

    try:
        return open_rgb(path)
    except ImageFileError as exc:
        raise CliError(str(exc)) from None


def check_motion(args) -> None:
    """CliError unless the command and ego motion make a planning prompt (finite numbers)
    within the node's plausibility bounds (``tasks.motion``), checked before the model
    loads."""
    try:
        tasks.planning_prompt(args.command, velocity=tuple(args.velocity),
                              acceleration=tuple(args.acceleration))
    except ValueError as exc:
        raise CliError(f"--velocity / --acceleration: {exc}") from None
    try:
        tasks.check_speed(args.velocity, what="--velocity: a speed of",
                          limit="the plausible")
        tasks.check_accel(args.acceleration, what="--acceleration: an acceleration of",
                          limit="the plausible")
    except tasks.ImplausibleMotion as exc:
        raise CliError(f"{exc} (the planning node refuses such odometry too)") from None


def run_plan(args) -> int:
    check_motion(args)
    candidates = candidate_settings(args)        # CliError with the reason when out of range
    images = [load_image(path) for path in args.image]
    planner = planner_from_args(args, **candidates)
    try:
        planner.check_images(images)
    except ValueError as exc:
        raise CliError(f"--image: {exc} (one path per camera)") from None
    obs = Observation(images=images, command=args.command, velocity=tuple(args.velocity),
                      acceleration=tuple(args.acceleration))
    try:
        result = planner.plan(obs)
    except tasks.AnswerParseError as exc:
        if args.json:
            print(json.dumps({"ok": False, "error": exc.reason, "raw_text": exc.raw_text}))
        else:
            print(f"wamdiff2 plan: the model's answer is not a valid plan: {exc.reason}")
            print(f"raw answer: {exc.raw_text!r}")
        return 1
    stats = result.stats.to_dict()
    cset = result.candidates
    if args.json:
        extra = {} if cset is None else {"candidates": {
            **cset.selection.to_json(), "texts": [c.text for c in cset.candidates]}}
        print(json.dumps({"ok": True, "waypoints": result.waypoints.tolist(),
                          "text": result.text, "stats": stats, **extra}))
        return 0
    print("waypoints (ego frame: x forward, y left; metres; t = 0.5 .. 4.0 s)")
    for i, (x, y) in enumerate(result.waypoints):
        print(f"  t={0.5 * (i + 1):.1f}s  x={x:7.2f}  y={y:7.2f}")
    print(f"decode: {stats['total_ms']:.1f} ms, {stats['tokens']} tokens, "
          f"{stats['forwards']} forwards, {stats['tokens_per_forward']:.2f} tokens/forward")
    if cset is not None:
        sel = cset.selection
        note = f" ({sel.fallback})" if sel.fallback else f", margin {sel.margin:.3g}"
        print(f"candidates: {len(cset)}, scorer {sel.scorer} chose {sel.chosen}{note}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="plan 8 waypoints from one camera image")
    add_model_arguments(p)
    add_exact_options(p)
    p.add_argument("--image", required=True, nargs="+", metavar="PATH",
                   help="front camera image (PNG/JPEG); a model of several cameras: one per "
                        "camera, in its order (model.describe() names them)")
    p.add_argument("--command", default="straight", choices=list(tasks.COMMANDS))
    p.add_argument("--velocity", type=float, nargs=2, default=(0.0, 0.0),
                   metavar=("VX", "VY"), help="ego velocity, m/s (x forward, y left)")
    p.add_argument("--acceleration", type=float, nargs=2, default=(0.0, 0.0),
                   metavar=("AX", "AY"), help="ego acceleration, m/s^2")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_candidate_options(p)
    p.set_defaults(func=run_plan)
