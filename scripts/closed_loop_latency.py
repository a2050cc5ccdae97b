#!/usr/bin/env python3
"""Latency in the loop: the README's table (docs/simulation.md, "Closed loop in time").

For each planner (LABEL=CHECKPOINT[+decoding options]) it runs `wamdiff2 eval closed-loop` on
the same episodes in up to four ways: synchronous in this process (the world waits), through
the node in real time (the world moves on), and under the H200 latency model in this
process and through the node; then it prints one Markdown row per planner: score and latency
p50 (ms) of each run. Reports go to OUT/<label>/<mode>/. The README's figures (AR_CKPT: an
AR checkpoint, here a stage-0 model of the same size and data; docs/history.md, 2026-12-01):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/closed_loop_latency.py --episodes 3 \\
        --seed 1000 --out runs/latency3 \\
        --planner diffusion=wamdiff2_core/assets/default_model \\
        --planner "diffusion-fast=wamdiff2_core/assets/default_model+--commit-rule \\
low_confidence_leftmost --steps-per-block 8 --threshold 0.95" \\
        --planner ar-stage0=AR_CKPT

A run whose report exists is not run again (delete OUT/<label>/<mode> to redo it).
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

MODES = {
    "sync": [],
    "node-realtime": ["--through-node"],
    "h200": ["--time", "latency-model", "--latency", "h200"],
    "node-h200": ["--through-node", "--time", "latency-model", "--latency", "h200"],
    "h200-as-ar": ["--time", "latency-model", "--latency", "h200:ar"],
}
DEFAULT_MODES = ("sync", "node-realtime", "h200", "node-h200")


def run(label: str, spec: str, mode: str, args) -> dict:
    checkpoint, _, options = spec.partition("+")
    out = Path(args.out) / label / mode
    report = out / "closed_loop.json"
    if not report.exists():
        cmd = [str(Path(sys.executable).parent / "wamdiff2"), "eval", "closed-loop",
               "--planner", f"checkpoint:{checkpoint}", "--episodes", str(args.episodes),
               "--seed", str(args.seed), "--out", str(out), "--no-progress",
               *shlex.split(options), *MODES[mode]]
        print("$", shlex.join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(report.read_text())


def cell(report: dict) -> str:
    lat = report["latency"]["latency_ms"]["p50"]
    if report["time_mode"] == "sync":             # no latency: the planner's own wall time
        lat = report["timing"]["planner_ms"]["p50"]
    failed = len(report["failed_episodes"])
    note = f", {failed} failed" if failed else ""
    return f"{report['score']:.3f} ({lat:.0f} ms{note})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", action="append", required=True, metavar="LABEL=SPEC")
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--out", default="runs/latency_in_the_loop")
    args = parser.parse_args()
    modes = args.modes.split(",")
    rows = []
    for item in args.planner:
        label, _, spec = item.partition("=")
        rows.append([label] + [cell(run(label, spec, mode, args)) for mode in modes])
    print("| planner | " + " | ".join(modes) + " |")
    print("|---" * (len(modes) + 1) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\nscore (latency p50: image stamp -> plan received in simulated time; for sync, "
          "where the world waits, the planner's own wall time per plan)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
