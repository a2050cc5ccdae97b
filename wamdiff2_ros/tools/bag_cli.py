"""``wamdiff2 bag record-sim | replay | eval | info`` and ``wamdiff2 demo`` (docs/bags.md).

Thin: parse, build the config, call the module, print. A bad bag or output path is a
`BagError`, shown as one sentence with exit code 2 (`wamdiff2_core.apps.common.CliError`).
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from wamdiff2_core.apps.common import (CAMERAS_HELP, CliError, add_decode_options,
                                       apply_threads, check_threads, decode_config,
                                       language_hint, subgroup)
from wamdiff2_core.apps.outputs import check_output


def _user_errors(func):
    """Turn BagError, DemoError, CheckpointError and ArgumentValueError into CliError (one
    sentence, exit 2); anything else is a bug and keeps its traceback."""
    @functools.wraps(func)
    def wrapper(args) -> int:
        from wamdiff2_core.model.checkpoint import CheckpointError      # torch-free
        from wamdiff2_ros.tools.bag_io import BagError
        from wamdiff2_ros.tools.demo_graph import DemoError

        user_errors = [BagError, DemoError, ArgumentValueError, CheckpointError]
        try:
            return func(args)
        except tuple(user_errors) as exc:
            raise CliError(str(exc)) from None
        except ValueError as exc:             # a constrained answer's budget: the user's
            constraints = sys.modules.get("wamdiff2_core.decoding.constraints.automaton")
            if constraints is None or not isinstance(exc, constraints.LanguageError):
                raise
            raise CliError(language_hint(exc)) from None
    return wrapper


class ArgumentValueError(ValueError):
    """A command-line value the configuration rejected."""


def _checked(build, *args, **kwargs):
    """`build(*args, **kwargs)`, its ValueError re-raised as ArgumentValueError."""
    try:
        return build(*args, **kwargs)
    except ValueError as exc:
        raise ArgumentValueError(str(exc)) from None


def _bag_output(out: str | Path, fmt: str | None = None, flag: str = "--out") -> None:
    """`check_output` for an output bag: one storage file (.mcap / .db3) or a folder."""
    from wamdiff2_ros.tools.bag_io import output_layout

    check_output(out, flag, folder=not output_layout(out, fmt)[2])


def register(subparsers) -> None:
    """Add the `bag` group (record-sim, replay, eval, info) and the top-level `demo`."""
    group = subgroup(subparsers, "bag")
    _register_record(group)
    _register_replay(group)
    _register_eval(group)
    _register_info(group)
    _register_demo(subparsers)


# ------------------------------------------------------------------------------ record-sim
def _register_record(group) -> None:
    p = group.add_parser(
        "record-sim", help="simulator episodes into a ROS 2 bag",
        description="Simulate expert episodes and record the front camera or a camera rig "
                    "(Image and CompressedImage, CameraInfo per camera), odometry, the "
                    "navigation command and ground truth (future path, boxes) into a bag. "
                    "Deterministic.")
    p.add_argument("--out", required=True, help="output bag: a .mcap or .db3 file, or a "
                                                "rosbag2 directory")
    p.add_argument("--format", choices=("mcap", "sqlite3"), default=None,
                   help="storage (default: from --out's suffix, else mcap)")
    p.add_argument("--episodes", type=int, default=1, help="episodes (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--frames", type=int, default=20,
                   help="camera frames per episode, 0.5 s apart (default 20)")
    p.add_argument("--scenarios", default=None,
                   help="comma-separated scenario families, cycled per episode (default: all)")
    p.add_argument("--resolution", default="320x180", help="camera WxH (default 320x180)")
    p.add_argument("--cameras", default="", metavar="RIG",
                   help=CAMERAS_HELP + "; several: each on /camera/<name>/...")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_record)


@_user_errors
def _record(args) -> int:
    from wamdiff2_core.sim.camera import parse_resolution
    from wamdiff2_core.sim.scenarios import parse_scenarios
    from wamdiff2_ros.tools.bag_record import RecordConfig, record_sim

    _bag_output(args.out, args.format)
    width, height = _checked(parse_resolution, args.resolution)
    config = _checked(RecordConfig, episodes=args.episodes, seed=args.seed,
                      frames=args.frames, scenarios=_checked(parse_scenarios, args.scenarios),
                      width=width, height=height, cameras=args.cameras)
    _checked(config.episode_config)
    summary = record_sim(args.out, config, args.format, progress=not args.no_progress)
    print(f"wrote {summary.out}: {summary.frames} frames in {summary.episodes} episode(s), "
          f"{sum(summary.messages.values())} messages, {summary.duration_s:.1f} s of bag "
          f"time, {summary.bytes / 1e6:.2f} MB, in {summary.seconds:.1f} s")
    if summary.skipped_episodes:
        print(f"note: episodes {summary.skipped_episodes} gave no frame (the expert crashed "
              "early)", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------ replay
def _register_replay(group) -> None:
    p = group.add_parser(
        "replay", help="publish a bag into the live ROS graph at recorded timing",
        description="Publish a bag's messages as recorded (raw CDR bytes) at recorded "
                    "timing, after checking them as bag eval does (a corrupt message, a "
                    "non-image on a camera topic or repeated camera stamps: refused; a camera "
                    "message the node would drop: skipped and counted; --as-is: unchecked). "
                    "Ctrl-C stops cleanly.")
    p.add_argument("bag", help="bag: a rosbag2 directory or a .mcap / .db3 file")
    p.add_argument("--rate", type=float, default=1.0, help="speed factor (default 1.0)")
    p.add_argument("--topics", nargs="+", default=None, metavar="TOPIC",
                   help="replay only these bag topics (default: all)")
    p.add_argument("--remap", action="append", default=[], metavar="FROM:=TO",
                   help="publish bag topic FROM as TO (repeatable)")
    p.add_argument("--loop", action="store_true", help="start again at the end")
    p.add_argument("--clock", type=float, nargs="?", const=40.0, default=0.0, metavar="HZ",
                   help="also publish the bag's time on /clock, HZ times a second (default "
                        "40) and before every message, for nodes with use_sim_time")
    p.add_argument("--delay", type=float, default=0.0, metavar="S",
                   help="wait S seconds after creating the publishers (default 0)")
    p.add_argument("--wait-for", nargs="+", default=(), metavar="TOPIC",
                   help="bag topics that must have a subscriber before the first message")
    p.add_argument("--wait-timeout", type=float, default=30.0, metavar="S",
                   help="how long --wait-for waits (default 30 s)")
    p.add_argument("--latched", nargs="+", default=(), metavar="TOPIC",
                   help="bag topics to publish transient local (latched), e.g. a command "
                        "for the planner node: no incompatible-QoS warning then")
    p.add_argument("--as-is", action="store_true",
                   help="publish every message unchecked (to test a node with bad data); by "
                        "default the bag is checked as bag eval checks it and camera "
                        "messages the node would drop are skipped and counted")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=_replay)


@_user_errors
def _replay(args) -> int:
    from wamdiff2_ros.tools.bag_replay import ReplayConfig, parse_remaps, progress_printer, replay

    config = _checked(ReplayConfig, bag=Path(args.bag), rate=args.rate,
                      topics=tuple(args.topics) if args.topics else None,
                      remaps=_checked(parse_remaps, args.remap), loop=args.loop,
                      delay_s=args.delay, clock_hz=args.clock, as_is=args.as_is,
                      latched=tuple(args.latched))
    show = None if args.quiet else progress_printer(config.rate)
    result = replay(config, wait_for=tuple(args.wait_for), wait_timeout_s=args.wait_timeout,
                    progress=show)
    if show is not None:
        if show.tty:
            print(file=sys.stderr)
        how = "stopped (Ctrl-C)" if result.interrupted else "done"
        print(f"[replay] {how}: {result.messages} messages published", file=sys.stderr)
    if result.skipped:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(result.skipped.items()))
        count = sum(result.skipped.values())
        print(f"note: skipped {count} camera message{'s' if count != 1 else ''} the node "
              f"would drop ({kinds}); --as-is publishes them", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------ eval
def _register_eval(group) -> None:
    p = group.add_parser(
        "eval", help="run the planner offline on every camera frame of a bag",
        description="Plan (and detect) on every camera frame of a bag without DDS; write "
                    "paths, markers, detections and per-frame stats into an output bag, "
                    "overlay PNGs, and a JSON report with the open-loop metrics where the "
                    "bag carries ground truth.")
    p.add_argument("bag", help="input bag (rosbag2 directory or .mcap / .db3 file)")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint directory or preset; 'ground-truth' answers with the "
                        "bag's ground truth (default: the bundled model)")
    p.add_argument("--out", required=True, help="output bag (.mcap file or directory)")
    p.add_argument("--report", required=True, help="JSON report path")
    p.add_argument("--frames", default=None, metavar="DIR",
                   help="overlay PNG folder (default: <report>_frames next to the report)")
    p.add_argument("--no-frames", action="store_true", help="write no PNGs")
    p.add_argument("--camera-topic", default=None,
                   help="camera topic (Image or CompressedImage); needed when the bag has "
                        "several or does not use the simulator's names")
    p.add_argument("--camera-topics", default=None, metavar="NAME:=TOPIC,...",
                   help="a model of several cameras: each camera's topic, e.g. "
                        "front:=/cam_f/image_raw,left:=/cam_l/image_raw (default: the "
                        "simulator's /camera/<name>/image_raw)")
    p.add_argument("--odometry-topic", default=None, help="nav_msgs/Odometry topic")
    p.add_argument("--command-topic", default=None, help="std_msgs/String command topic")
    p.add_argument("--gt-topic", default=None,
                   help="ground-truth nav_msgs/Path topic (future waypoints, base_link)")
    p.add_argument("--command", default="straight", choices=("left", "right", "straight"),
                   help="command when the bag has none (default straight)")
    p.add_argument("--tasks", default="planning,detection",
                   help="comma-separated: planning, detection (default both)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="first N frames only")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch CPU threads (default: torch's; 1 is far faster when other "
                        "processes keep the cores busy)")
    add_decode_options(p, ("block_size", "steps_per_block", "max_new_tokens", "constrained"))
    p.add_argument("--json", action="store_true", help="print the full JSON report")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_eval)


@_user_errors
def _eval(args) -> int:
    from wamdiff2_core.devices import check_device
    from wamdiff2_ros.tools.bag_eval import TASKS, EvalConfig, run_eval

    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ArgumentValueError(f"--tasks must be a subset of {', '.join(TASKS)}, got "
                                 f"{args.tasks!r}")
    _checked(apply_threads, args.threads)
    _checked(check_device, args.device)
    report = check_output(args.report, "--report", folder=False)
    frames = None if args.no_frames else Path(args.frames) if args.frames else \
        report.with_name(f"{report.stem}_frames")
    _bag_output(args.out)
    if frames is not None:
        check_output(frames, "--frames", folder=True)
    cfg = EvalConfig(bag=Path(args.bag), out=Path(args.out), report=report, frames_dir=frames,
                     checkpoint=args.checkpoint, decode=decode_config(args),
                     device=args.device, tasks=tasks, camera_topic=args.camera_topic,
                     camera_topics=_camera_topics(args.camera_topics),
                     odometry_topic=args.odometry_topic, command_topic=args.command_topic,
                     gt_topic=args.gt_topic, default_command=args.command, limit=args.limit,
                     progress=not args.no_progress)
    result = run_eval(cfg)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(eval_summary(result))
    return 0


def _camera_topics(text: str | None) -> dict[str, str] | None:
    """`--camera-topics` as {camera: topic}; ArgumentValueError for a malformed value."""
    from wamdiff2_ros.node.topics import parse_camera_topics

    return None if text is None else dict(_checked(parse_camera_topics, text))


def eval_summary(report: dict) -> str:
    """A few lines: frames, parse failures, latency, headline metrics, files."""
    gaps = report.get("frames_camera_gaps")
    lines = [f"{report['frames']} frames of {report['bag']} "
             f"({report['frames_with_ground_truth']} with ground truth, "
             f"{report['frames_bad_input']} unusable"
             + (f", {gaps} lacking a camera" if gaps else "")
             + f"), checkpoint {report['checkpoint']}"
             + (f", cameras {', '.join(report['cameras'])}" if len(report['cameras']) > 1
                else "")]
    for task in ("planning", "detection"):
        t = report.get(task)
        if t:
            lat = t["latency_ms"]
            lines.append(f"{task}: {t['parsed']}/{t['frames']} parsed, latency mean "
                         f"{lat['mean']} ms, p90 {lat['p90']} ms")
    ol = report.get("open_loop") or {}
    plan, det = ol.get("planning") or {}, ol.get("detection") or {}
    if plan.get("num_records"):
        lines.append(f"open loop: L2 avg 1/2/3 s {plan['l2_avg_1s']} / {plan['l2_avg_2s']} / "
                     f"{plan['l2_avg_3s']} m, collision rate {plan['collision_rate']} "
                     f"(expert {plan['gt_collision_rate']})")
    if det.get("num_records"):
        lines.append(f"detection: mAP {det.get('map')}, AP50 {det.get('ap50')}")
    lines.append(f"wrote {report['output_bag']}, {report['frames_dir'] or 'no PNGs'}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ info
def _register_info(group) -> None:
    p = group.add_parser("info", help="topics, types, counts and duration of a bag")
    p.add_argument("bag", help="bag (rosbag2 directory or .mcap / .db3 file)")
    p.set_defaults(func=_info)


@_user_errors
def _info(args) -> int:
    from wamdiff2_ros.tools.bag_io import BagReader

    with BagReader(args.bag) as bag:
        duration = max(0, bag.end_ns - bag.start_ns - 1) * 1e-9
        print(f"{bag.path}: {sum(t.count for t in bag.topics.values())} messages, "
              f"{duration:.2f} s from {bag.start_ns * 1e-9:.3f}")
        width = max((len(t) for t in bag.topics), default=0)
        for t in bag.topics.values():
            print(f"  {t.name:<{width}}  {t.count:>6}  {t.msgtype}")
    return 0


# ------------------------------------------------------------------------------ demo
def _register_demo(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="the planner node live on the bundled sample bag",
        description="Start planner_node with the bundled model and config, replay the "
                    "bundled sample bag into it through DDS, record what it publishes, "
                    "write overlay PNGs and print per-frame latency and open-loop metrics.")
    p.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--bag", default=None, help="another simulator bag (default: the sample)")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint directory or preset (default: the bundled model)")
    p.add_argument("--rate", type=float, default=1.0, help="replay speed (default 1.0)")
    p.add_argument("--compressed", action="store_true",
                   help="replay the JPEG topic into ~/input/image/compressed")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="the node's torch threads (OMP_NUM_THREADS; 1 is far faster when "
                        "other processes keep the cores busy)")
    p.add_argument("--domain-id", type=int, default=None,
                   help="ROS_DOMAIN_ID (default: one of this process's own)")
    p.add_argument("--param", action="append", default=[], metavar="NAME:=VALUE",
                   help="extra node parameter (repeatable), e.g. decode.max_new_tokens:=64")
    p.add_argument("--startup-timeout", type=float, default=120.0, metavar="S",
                   help="how long the node may take to load and warm up (default 120)")
    p.add_argument("--quiet", action="store_true", help="only the table")
    p.set_defaults(func=_demo)


@_user_errors
def _demo(args) -> int:
    from wamdiff2_ros.tools.bag_replay import parse_remaps
    from wamdiff2_ros.tools.demo import SAMPLE_BAG, DemoConfig, run_demo

    try:
        overrides = parse_remaps(args.param)
    except ValueError:
        raise ArgumentValueError(f"--param must be NAME:=VALUE, got {args.param}") from None
    if args.domain_id is not None and not 0 <= args.domain_id <= 232:
        raise ArgumentValueError(f"--domain-id must be in 0..232, got {args.domain_id}")
    if args.rate <= 0:
        raise ArgumentValueError(f"--rate must be positive, got {args.rate}")
    _checked(check_threads, args.threads)
    check_output(args.out, "--out", folder=True)
    cfg = DemoConfig(out=Path(args.out), bag=Path(args.bag) if args.bag else SAMPLE_BAG,
                     checkpoint=args.checkpoint, overrides=overrides, rate=args.rate,
                     compressed=args.compressed, threads=args.threads,
                     domain_id=args.domain_id,
                     startup_timeout_s=args.startup_timeout,
                     verbose=not args.quiet)
    run_demo(cfg)
    return 0

