"""Step `node` of scripts/gpu_check.sh: image -> Path through `planner_node` next to the bare
planner (`wamdiff2 bench node`, one run, the same frames), or, where rclpy or the simulator
is missing, the bare planner alone on synthetic camera frames, with the reason the node was
not timed. A lent GPU machine has no ROS: the ROS 2 wheels (~43 MB) do not fit beside the
project's wheels in the 64 MiB that travels (docs/decoding.md, "On a GPU").

    python scripts/gpu_node_step.py OUT.json [--preset qwen3-vl-2b] [--device cuda]
        [--dtype bfloat16] [--frames 20] [--size 640x360] [--no-ros]
        [--max-new-tokens N] [--block-size N] [--no-constrained]

Writes OUT.json and prints it: ``planner_ms`` (p50, p95, p99, n: the bare planner),
``node`` (bench node's summary, or None), ``node_skipped`` (why not, or None).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

WARMUP_FRAMES = 2            # untimed, as bench node's


def ros_missing(no_ros: bool) -> str | None:
    """Why the node cannot be timed here, or None when it can."""
    if no_ros:
        return "ROS turned off (--no-ros / GPU_CHECK_ROS=0)"
    for module, what in (("rclpy", "no rclpy"), ("highway_env", "no simulator (highway-env)")):
        if importlib.util.find_spec(module) is None:
            return what
    return None


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "n": 0}
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 95, 99)} | {"n": len(values)}


def bench_node(a: argparse.Namespace, out: Path) -> dict:
    """`wamdiff2 bench node` through its own parser (no installed entry point needed)."""
    from wamdiff2_core.apps.common import CliError
    from wamdiff2_ros.tools import bench_cli

    parser = argparse.ArgumentParser(prog="wamdiff2")
    bench_cli.register(parser.add_subparsers(dest="wamdiff2_command"))
    json_path = out.with_name(out.stem + "_bench_node.json")
    argv = ["bench", "node", "--preset", a.preset, "--device", a.device, "--frames",
            str(a.frames), "--size", a.size, "--json", str(json_path)]
    args = parser.parse_args(argv + (["--dtype", a.dtype] if a.dtype else []))
    try:
        args.func(args)
    except CliError as exc:
        raise SystemExit(f"wamdiff2 bench node: error: {exc}") from None
    return json.loads(json_path.read_text())


def bare_planner(a: argparse.Namespace) -> list[float]:
    """Planner.plan on synthetic frames, each on a worker thread as the node plans (and as
    bench node times its bare planner); milliseconds of the timed frames."""
    from wamdiff2_core.planner import Planner, PlannerConfig
    from wamdiff2_core.sim.camera import parse_resolution
    from wamdiff2_core.tasks import AnswerParseError
    from wamdiff2_core.types import Observation

    from wamdiff2_core.decoding import DecodeConfig

    width, height = parse_resolution(a.size)
    knobs = {k: v for k, v in (("max_new_tokens", a.max_new_tokens),
                               ("block_size", a.block_size)) if v}
    decode = DecodeConfig(constrained=False if a.no_constrained else None, **knobs)
    planner = Planner.from_pretrained(a.preset, PlannerConfig(decode), device=a.device,
                                      dtype=a.dtype)
    planner.warmup(width, height)
    rng = np.random.default_rng(0)
    times: list[float] = []
    for i in range(WARMUP_FRAMES + a.frames):
        images = [rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
                  for _ in planner.cameras]
        took: list[float] = []

        def work() -> None:
            start = time.perf_counter()
            try:
                planner.plan(Observation(images=images))
            except AnswerParseError:       # a malformed answer still costs a full decode
                pass
            took.append((time.perf_counter() - start) * 1e3)
        thread = threading.Thread(target=work, name="bench-planner")
        thread.start()
        thread.join()
        if i >= WARMUP_FRAMES:
            times.append(took[0])
    return times


def main(a: argparse.Namespace) -> int:
    out = Path(a.out)
    skipped = ros_missing(a.no_ros)
    result = {"preset": a.preset, "device": a.device, "dtype": a.dtype, "size": a.size,
              "frames": a.frames, "node": None, "node_skipped": skipped}
    if skipped is None:
        node = bench_node(a, out)
        result.update(node=node, planner_ms=node["planner_ms"], frames_source="simulator")
    else:
        result.update(planner_ms=percentiles(bare_planner(a)), frames_source="synthetic noise")
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--preset", default="qwen3-vl-2b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--size", default="640x360", help="camera WIDTHxHEIGHT")
    parser.add_argument("--no-ros", action="store_true", help="time the bare planner alone")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="the bare planner's answer budget (default: the planner's)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="the bare planner's block size (default: the checkpoint's)")
    parser.add_argument("--no-constrained", action="store_true",
                        help="the bare planner decodes plans unconstrained (the CPU dry run)")
    sys.exit(main(parser.parse_args()))
