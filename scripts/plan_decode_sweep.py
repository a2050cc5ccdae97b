"""Planning answers of one checkpoint under several decoding settings, side by side.

For each setting: planning L2 per frame (the mean of the average L2 over the waypoints up
to 1, 2 and 3 s, as `bench decode` reports it), its mean, median and worst frame, how many
frames are off by more than 3 m, tokens per forward, and the answers that did not parse.
The tails matter here: a setting that commits more tokens per forward can keep the median
and lose a few plans by tens of metres (a waypoint's integer part written with a digit too
many), and a mean over 60 frames hides which.

    python scripts/plan_decode_sweep.py data/val3000/quarter.json \\
        wamdiff2_core/assets/default_model default: \\
        frontier:commit_rule=low_confidence_frontier,threshold=0.95 \\
        leftmost8:commit_rule=low_confidence_leftmost,steps_per_block=8,threshold=0.95

A setting is NAME:FIELD=VALUE,... over `DecodeConfig`'s fields (NAME: alone is the
default). `--worst N` also prints the N worst plans of each setting.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import fields, replace
from pathlib import Path

import numpy as np

from wamdiff2_core.decoding.config import DEFAULT_COMMIT_RULE, DecodeConfig
from wamdiff2_core.evaluation.l2 import l2_horizons, l2_per_waypoint
from wamdiff2_core.evaluation.open_loop import load_image
from wamdiff2_core.planner import Planner
from wamdiff2_core.tasks import (AnswerParseError, parse_planning_prompt, parse_waypoints,
                                 record_prompt_and_answer)
from wamdiff2_core.types import Observation

_TYPES = {f.name: f.type for f in fields(DecodeConfig)}


def parse_setting(spec: str) -> tuple[str, DecodeConfig]:
    name, _, items = spec.partition(":")
    kwargs = {}
    for item in filter(None, items.split(",")):
        key, _, value = item.partition("=")
        if key not in _TYPES:
            raise SystemExit(f"unknown DecodeConfig field {key!r} in {spec!r}")
        kind = str(_TYPES[key])
        kwargs[key] = (value if "str" in kind else float(value) if "float" in kind
                       else (value.lower() == "true") if "bool" in kind else int(value))
    return name or "default", DecodeConfig(**kwargs)


def frames(path: Path) -> list[tuple[Observation, np.ndarray]]:
    records = [r for r in json.loads(path.read_text()) if r.get("task") == "planning"]
    out = []
    for r in records:
        prompt, answer = record_prompt_and_answer(r)
        state = parse_planning_prompt(prompt)
        obs = Observation(images=[load_image(r, path.parent)], command=state["command"],
                          velocity=state["velocity"], acceleration=state["acceleration"],
                          position=state["position"])
        out.append((obs, parse_waypoints(answer)))
    return out


def l2_bench(pred: np.ndarray, truth: np.ndarray) -> float:
    """Mean of the average L2 over the waypoints up to 1, 2 and 3 s (``bench decode``'s)."""
    h = l2_horizons(l2_per_waypoint(pred, truth))
    return float(np.mean([h["l2_avg_1s"], h["l2_avg_2s"], h["l2_avg_3s"]]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path, help="a records file of a generated data set")
    ap.add_argument("checkpoint")
    ap.add_argument("settings", nargs="*", default=["default:"])
    ap.add_argument("--worst", type=int, default=0, help="print the N worst plans")
    args = ap.parse_args(argv)
    data = frames(args.records)
    base = Planner.from_pretrained(args.checkpoint)
    print(f"{args.checkpoint}: {len(data)} planning frames of {args.records}")
    for spec in args.settings:
        name, cfg = parse_setting(spec)
        # exactly this setting: a named rule, so the checkpoint's recommendation never applies
        planner = base.reconfigure(decode=replace(cfg, commit_rule=cfg.commit_rule
                                                  or DEFAULT_COMMIT_RULE))
        rows, tokens, forwards, unparsed = [], 0, 0, 0
        for i, (obs, truth) in enumerate(data):
            try:
                res = planner.plan(obs)
            except AnswerParseError:
                unparsed += 1
                continue
            rows.append((l2_bench(res.waypoints, truth), i, res.text))
            tokens += res.stats.tokens
            forwards += res.stats.forwards
        l2 = np.array([r[0] for r in rows])
        print(f"{name:>12}: L2 mean {l2.mean():.3f} m, median {np.median(l2):.3f}, worst "
              f"{l2.max():.2f} (frames > 3 m: {int((l2 > 3).sum())}), tokens/forward "
              f"{tokens / max(forwards, 1):.2f}, unparsed {unparsed}/{len(data)}")
        for err, i, text in sorted(rows, reverse=True)[:args.worst]:
            print(f"{'':>14}frame {i}: {err:.2f} m  {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
