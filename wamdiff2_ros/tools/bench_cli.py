"""`wamdiff2 bench node`: end-to-end node latency next to the bare planner (thin: parse,
build a BenchConfig, call wamdiff2_ros.tools.node_bench)."""
from __future__ import annotations

import argparse
import json

from wamdiff2_core.apps.common import (CliError, add_decode_options, add_model_arguments,
                                       decode_config, subgroup)
from wamdiff2_core.sim.camera import parse_resolution
from wamdiff2_core.types import bundled_checkpoint_path


def register(subparsers) -> None:
    bench = subgroup(subparsers, "bench")
    parser = bench.add_parser(
        "node", help="image -> Path latency through planner_node vs the bare planner",
        description="Start planner_node with the params file, publish simulator frames one "
                    "at a time over DDS and time image -> Path (p50, p95) next to "
                    "Planner.plan on the same frames in this process.")
    add_model_arguments(parser)
    add_decode_options(parser, ("max_new_tokens",))
    parser.add_argument("--frames", type=int, default=20, help="timed frames (default 20)")
    parser.add_argument("--size", default="640x360", help="camera WIDTHxHEIGHT (640x360)")
    parser.add_argument("--params-file", default=None,
                        help="node parameters (default: the package's config/wamdiff2.yaml)")
    parser.add_argument("--domain-id", type=int, default=0,
                        help="ROS_DOMAIN_ID for the run (default: derived from the pid)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.set_defaults(func=run)


def _size(text: str) -> tuple[int, int]:
    try:
        return parse_resolution(text)
    except ValueError as exc:
        raise CliError(f"--size: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wamdiff2_ros.tools.node_bench import BenchConfig, run_bench

    if args.frames < 1:
        raise CliError("--frames must be at least 1")
    if not 0 <= args.domain_id <= 232:
        raise CliError("--domain-id must be in 0..232")
    width, height = _size(args.size)
    decode = decode_config(args)
    checkpoint = args.checkpoint or args.preset
    if checkpoint is None and bundled_checkpoint_path() is None:
        raise CliError("this checkout has no bundled model: pass --checkpoint DIR or "
                       "--preset NAME")
    cfg = BenchConfig(checkpoint=checkpoint, decode=decode, backend=args.backend,
                      device=args.device, dtype=args.dtype, frames=args.frames, width=width,
                      height=height, domain_id=args.domain_id,
                      params_file=Path(args.params_file) if args.params_file else None)
    try:
        result = run_bench(cfg)
    except (RuntimeError, TimeoutError) as exc:
        raise CliError(str(exc)) from None
    print(f"wamdiff2 bench node: {checkpoint or 'bundled model'} on {args.device}, "
          f"{width}x{height}, {args.frames} frames, {decode}, backend {args.backend}")
    print(result.table())
    if args.json:
        Path(args.json).write_text(json.dumps(result.summary(), indent=2) + "\n")
    return 0
