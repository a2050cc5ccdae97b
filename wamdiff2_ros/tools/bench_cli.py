"""`wamdiff2 bench node`: end-to-end node latency next to the bare planner (thin: parse,
build a BenchConfig, call wamdiff2_ros.tools.node_bench); `bench soak`, the node under a
steady camera; `bench dds`, camera frames delivered under this machine's DDS setting
(wamdiff2_ros.tools.dds_delivery)."""
from __future__ import annotations

import argparse
import json

from wamdiff2_core.apps.common import (CAMERAS_HELP, CliError, add_decode_options,
                                       add_model_arguments, decode_config, field_overrides,
                                       language_hint, subgroup)
from wamdiff2_core.apps.outputs import check_output
from wamdiff2_core.sim.camera import parse_resolution
from wamdiff2_core.types import bundled_checkpoint_path


def _node_options(parser: argparse.ArgumentParser) -> None:
    """What both node benchmarks take: the model, decoding, camera size, params file, domain,
    and a JSON copy of the numbers."""
    add_model_arguments(parser)
    add_decode_options(parser, ("max_new_tokens",))
    parser.add_argument("--size", default="640x360", help="camera WIDTHxHEIGHT (640x360)")
    parser.add_argument("--params-file", default=None,
                        help="node parameters (default: the package's config/wamdiff2.yaml)")
    parser.add_argument("--domain-id", type=int, default=0,
                        help="ROS_DOMAIN_ID for the run (default: derived from the pid)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")


DDS_NOTE = (" The node runs under the package's Fast DDS profile (config/fastdds_node.xml), "
            "as the launch file starts it, unless the environment has a DDS setting of its "
            "own (RMW_IMPLEMENTATION, FASTRTPS_DEFAULT_PROFILES_FILE, "
            "FASTDDS_DEFAULT_PROFILES_FILE or FASTDDS_BUILTIN_TRANSPORTS; one set empty: Fast "
            "DDS's defaults).")


def register(subparsers) -> None:
    bench = subgroup(subparsers, "bench")
    parser = bench.add_parser(
        "node", help="image -> Path latency through planner_node vs the bare planner",
        description="Start planner_node with the params file, publish simulator frames one "
                    "at a time over DDS and time image -> Path (p50, p95) next to "
                    "Planner.plan on the same frames in this process. With --question-rate, "
                    "the same frames again under a question load, and both phases' Paths per "
                    "frame and frame -> Path p50/p99/max." + DDS_NOTE)
    _node_options(parser)
    parser.add_argument("--frames", type=int, default=20, help="timed frames (default 20)")
    parser.add_argument("--cameras", metavar="RIG",
                        help=CAMERAS_HELP + "; each frame is one image per camera, the prompt "
                             "one image per camera (a checkpoint trained with other cameras "
                             "is timed as a copy of its weights naming these)")
    parser.add_argument("--question-rate", type=float, default=0.0, metavar="HZ",
                        help="also time a second phase on the same frames with a question "
                             "published every 1/HZ s beside the camera, and report both "
                             "phases' Paths per frame and frame -> Path p50/p99/max (default "
                             "0: no questions)")
    parser.add_argument("--side-delay-ms", type=float, default=5.0, metavar="MS",
                        help="with --cameras: the other cameras' images (stamped as the "
                             "trigger's) are published this long after the trigger's; "
                             "negative: before it (default 5)")
    parser.set_defaults(func=run)

    soak = bench.add_parser(
        "soak", help="the node under a steady camera for minutes: memory, paths/min, latency",
        description="Start planner_node with the params file as shipped, publish simulator "
                    "frames (with odometry at their speed) at --rate for --minutes, and "
                    "report the node's RSS (start, end, max), Paths per minute by source "
                    "and image -> Path latency p50/p95." + DDS_NOTE)
    _node_options(soak)
    soak.add_argument("--minutes", type=float, default=10.0, help="duration (default 10)")
    soak.add_argument("--rate", type=float, default=15.0, help="camera Hz (default 15)")
    soak.set_defaults(func=run_soak)

    dds = bench.add_parser(
        "dds", help="camera frames a subscriber in another process receives under this "
                    "machine's DDS setting",
        description="Publish --frames rgb8 images of --size at --rate to a subscriber in a "
                    "child process (same environment, or --sub-profile as its Fast DDS "
                    "profile) and print frames delivered and latency p50/p95. The DDS "
                    "setting under test is the environment's (RMW_IMPLEMENTATION, "
                    "FASTRTPS_DEFAULT_PROFILES_FILE, FASTDDS_BUILTIN_TRANSPORTS, ...).")
    dds.add_argument("--size", default="640x360", help="image WIDTHxHEIGHT (640x360)")
    dds.add_argument("--rate", type=float, default=15.0, help="frames per second (default 15)")
    dds.add_argument("--frames", type=int, default=60, help="frames to send (default 60)")
    dds.add_argument("--pub-qos", choices=("reliable", "best_effort"), default="reliable",
                     help="the publisher's reliability (default reliable, as most camera "
                          "drivers and `bag replay`)")
    dds.add_argument("--sub-qos", choices=("reliable", "best_effort"), default="best_effort",
                     help="the subscriber's reliability (default best_effort)")
    dds.add_argument("--settle-s", type=float, default=2.0, metavar="SECONDS",
                     help="wait after the match before the first frame (default 2)")
    dds.add_argument("--sub-profile", default="", metavar="XML",
                     help="a Fast DDS profile for the subscriber only, e.g. "
                          "config/fastdds_node.xml (the publisher keeps the environment's "
                          "setting)")
    dds.add_argument("--domain-id", type=int, default=0,
                     help="ROS_DOMAIN_ID for the run (default: derived from the pid)")
    dds.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    dds.set_defaults(func=run_dds)


def _size(text: str) -> tuple[int, int]:
    try:
        return parse_resolution(text)
    except ValueError as exc:
        raise CliError(f"--size: {exc}") from None


def _bench_config(args: argparse.Namespace, frames: int, as_shipped: bool):
    from pathlib import Path

    from wamdiff2_ros.tools.node_bench import BenchConfig

    if not 0 <= args.domain_id <= 232:
        raise CliError("--domain-id must be in 0..232")
    width, height = _size(args.size)
    cameras = getattr(args, "cameras", None)
    if cameras:
        from wamdiff2_core.sim.camera import CameraConfig, load_rig

        try:
            load_rig(cameras, CameraConfig(width=width, height=height))
        except ValueError as exc:
            raise CliError(str(exc)) from None
    checkpoint = args.checkpoint or args.preset
    if checkpoint is None and bundled_checkpoint_path() is None:
        raise CliError("this checkout has no bundled model: pass --checkpoint DIR or "
                       "--preset NAME")
    return BenchConfig(checkpoint=checkpoint, decode=decode_config(args), backend=args.backend,
                       device=args.device, dtype=args.dtype, frames=frames, width=width,
                       height=height, domain_id=args.domain_id, as_shipped=as_shipped,
                       params_file=Path(args.params_file) if args.params_file else None,
                       fields=field_overrides(args), cameras=cameras)


def run_soak(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from wamdiff2_ros.tools.node_soak import SoakConfig, run_soak as soak

    if not args.minutes > 0 or not 0 < args.rate <= 200:
        raise CliError("--minutes must be > 0 and --rate in (0, 200]")
    if args.json:
        check_output(args.json, "--json", folder=False)
    from wamdiff2_ros.tools.demo_graph import describe_dds_profile

    bench = _bench_config(args, 1, as_shipped=True)
    print(f"wamdiff2 bench soak: {bench.checkpoint or 'bundled model'} on {args.device}, "
          f"{bench.width}x{bench.height} at {args.rate:g} Hz for {args.minutes:g} min; node: "
          f"{describe_dds_profile()}", flush=True)
    from wamdiff2_core.decoding.constraints.automaton import LanguageError

    try:
        result = soak(SoakConfig(bench, minutes=args.minutes, rate_hz=args.rate),
                      say=lambda line: print(line, file=sys.stderr, flush=True))
    except LanguageError as exc:       # the answer budget cannot hold a constrained plan
        raise CliError(language_hint(exc)) from None
    except (RuntimeError, TimeoutError) as exc:
        raise CliError(str(exc)) from None
    print(result.lines())
    if args.json:
        Path(args.json).write_text(json.dumps(result.summary(), indent=2) + "\n")
    return 0


def run_dds(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wamdiff2_ros.tools.dds_delivery import DeliveryConfig, measure_delivery

    width, height = _size(args.size)
    if args.frames < 1 or not 0 < args.rate <= 1000 or args.settle_s < 0:
        raise CliError("--frames must be at least 1, --rate in (0, 1000] and --settle-s >= 0")
    if not 0 <= args.domain_id <= 232:
        raise CliError("--domain-id must be in 0..232")
    if args.sub_profile and not Path(args.sub_profile).is_file():
        raise CliError(f"--sub-profile {args.sub_profile} is not a file")
    if args.json:
        check_output(args.json, "--json", folder=False)
    cfg = DeliveryConfig(width=width, height=height, rate_hz=args.rate, frames=args.frames,
                         pub_qos=args.pub_qos, sub_qos=args.sub_qos, settle_s=args.settle_s,
                         sub_profile=args.sub_profile, domain_id=args.domain_id)
    try:
        result = measure_delivery(cfg)
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    print(result.line(), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result.summary(), indent=2) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wamdiff2_ros.tools.demo_graph import describe_dds_profile
    from wamdiff2_ros.tools.node_bench import run_bench

    if args.frames < 1:
        raise CliError("--frames must be at least 1")
    if not 0 <= args.question_rate <= 100:
        raise CliError(f"--question-rate must be in 0..100 Hz, got {args.question_rate:g}")
    if not -1000 <= args.side_delay_ms <= 1000:
        raise CliError(f"--side-delay-ms must be in -1000..1000, got {args.side_delay_ms:g}")
    if args.json:
        check_output(args.json, "--json", folder=False)
    from dataclasses import replace

    cfg = replace(_bench_config(args, args.frames, as_shipped=False),
                  question_rate_hz=args.question_rate, side_delay_ms=args.side_delay_ms)
    checkpoint, width, height = cfg.checkpoint, cfg.width, cfg.height
    from wamdiff2_core.decoding.constraints.automaton import LanguageError

    try:
        result = run_bench(cfg)
    except LanguageError as exc:       # the answer budget cannot hold a constrained plan
        raise CliError(language_hint(exc)) from None
    except (RuntimeError, TimeoutError) as exc:
        raise CliError(str(exc)) from None
    print(f"wamdiff2 bench node: {checkpoint or 'bundled model'} on {args.device}, "
          f"{width}x{height}, {args.frames} frames, decoding with {result.decode}; node: "
          f"{describe_dds_profile()}")
    print(f"cameras: {', '.join(result.cameras)} ({len(result.cameras)}); planning prompt "
          f"{result.prompt_tokens} tokens"
          + ("; the weights were trained with other cameras: timing only"
             if result.renamed else ""))
    print(result.table())
    if args.json:
        Path(args.json).write_text(json.dumps(result.summary(), indent=2) + "\n")
    return 0
