"""`wamdiff2 bench candidates`: what K candidate plans cost per frame (image -> chosen plan).

Simulator frames (fresh episodes of ``--seed``) are planned by one planner per K, the K's
taking turns frame by frame so that a change of machine load hits them alike; each call is
the whole ``Planner.plan`` (prompt, one batched decode of K rows, parsing, scoring). Prints
p50 / p90 per K, the ratio of each p50 to K = 1's, and the decode's own split (prefill,
denoising) and forwards.
"""
from __future__ import annotations

import argparse
import json
import time

from wamdiff2_core.apps.common import CliError, apply_threads, subgroup


def register(subparsers) -> None:
    bench = subgroup(subparsers, "bench")
    p = bench.add_parser("candidates", help="plan latency per frame with K candidate plans "
                                            "against K = 1")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR", help="default: the bundled model")
    src.add_argument("--preset", metavar="NAME", help="an untrained model of a named shape "
                                                      "(e.g. qwen3-vl-2b with --device cuda)")
    p.add_argument("--ks", default="1,4,8", help="candidate counts to time (default 1,4,8)")
    p.add_argument("--frames", type=int, default=24, metavar="N",
                   help="simulator frames timed per K (default 24)")
    p.add_argument("--seed", type=int, default=3000, help="simulator seed (default 3000)")
    p.add_argument("--scorer", default="rules",
                   help="the scorer of K > 1 (default rules: needs no weights file)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: float32)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch CPU threads (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_bench_candidates)


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise CliError(f"--ks: {text!r} is not a comma-separated list of integers") from None
    if not ks or ks[0] != 1:
        raise CliError("--ks must include 1 (the baseline the others are compared with)")
    return ks


def frames(seed: int, count: int) -> list:
    """``count`` planning observations from closed-loop frames of fresh episodes (the ego
    held straight at its speed; images, command and motion as the closed loop gives them,
    nothing privileged)."""
    from wamdiff2_core.sim.candidate_planners import public_observation
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, capture_frame
    from wamdiff2_core.sim.generator import episode_seed
    from wamdiff2_core.sim.renderer import CameraRenderer
    from wamdiff2_core.sim.scenarios import SCENARIOS
    from wamdiff2_core.sim.world import World

    config, out, episode = ClosedLoopConfig(), [], 0
    while len(out) < count:
        scenario = list(SCENARIOS)[episode % len(SCENARIOS)]
        world = World(scenario, episode_seed(seed, episode), ego="controlled")
        renderer = CameraRenderer(config.camera, world.lanes)
        try:
            for _ in range(min(8, count - len(out))):
                out.append(public_observation(capture_frame(world, renderer, config)
                                              .observation))
                for _ in range(5):
                    world.step((0.0, 0.0))
        finally:
            renderer.close()
        episode += 1
    return out


def run_bench_candidates(args: argparse.Namespace) -> int:
    import numpy as np

    from wamdiff2_core.candidates import CandidateConfig, CandidateConfigError
    from wamdiff2_core.planner import Planner, PlannerConfig

    ks = _ks(args.ks)
    if args.frames < 1:
        raise CliError("--frames must be at least 1")
    try:
        apply_threads(args.threads)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        CandidateConfig(k=max(ks), scorer=args.scorer)
    except CandidateConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        base = Planner.from_pretrained(args.checkpoint or args.preset, device=args.device,
                                       dtype=args.dtype)
        planners = {k: base if k == 1 else base.reconfigure(PlannerConfig(
            candidates=CandidateConfig(k=k, scorer=args.scorer))) for k in ks}
    except ValueError as exc:
        raise CliError(str(exc)) from None
    observations = frames(args.seed, args.frames)
    for planner in planners.values():
        planner.warmup()
    times = {k: [] for k in ks}
    stats = {k: [] for k in ks}
    for observation in observations:
        for k, planner in planners.items():
            start = time.perf_counter()
            result = planner.plan(observation)
            times[k].append((time.perf_counter() - start) * 1e3)
            stats[k].append(result.stats)
    base_p50 = float(np.median(times[1]))
    rows = []
    for k in ks:
        ms = np.array(times[k])
        rows.append({"k": k, "p50_ms": round(float(np.median(ms)), 1),
                     "p90_ms": round(float(np.percentile(ms, 90)), 1),
                     "ratio_p50": round(float(np.median(ms)) / base_p50, 2),
                     "prefill_ms": round(float(np.median([s.prefill_ms for s in stats[k]])), 1),
                     "decode_ms": round(float(np.median([s.decode_ms for s in stats[k]])), 1),
                     "forwards": float(np.median([s.forwards for s in stats[k]]))})
    report = {"checkpoint": args.checkpoint or args.preset or "bundled", "device": args.device,
              "threads": args.threads, "frames": len(observations), "scorer": args.scorer,
              "rows": rows}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"plan latency per frame, {len(observations)} simulator frames (seed {args.seed}), "
          f"{report['checkpoint']} on {args.device}, {args.threads} thread(s)")
    print("    K   p50 ms   p90 ms  x K=1  prefill ms  decode ms  forwards")
    for r in rows:
        print(f"  {r['k']:3d} {r['p50_ms']:8.1f} {r['p90_ms']:8.1f} {r['ratio_p50']:6.2f} "
              f"{r['prefill_ms']:11.1f} {r['decode_ms']:10.1f} {r['forwards']:9.0f}")
    return 0
