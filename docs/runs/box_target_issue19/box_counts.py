"""Scratch probe (not part of the package): boxes per image that a checkpoint writes, against
the frame's own count, on a detection records file.
    python box_counts.py DATA.json CHECKPOINT [CHECKPOINT ...] [--rule RULE]
Per checkpoint: mean boxes per image, share of empty answers, share of images answered with
fewer boxes than they have, and the mean written per true count (0, 1, 2, 3, 4+)."""
import argparse, json
from collections import defaultdict
from pathlib import Path

from PIL import Image

from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.planner import Planner, load_model

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("checkpoints", nargs="+")
ap.add_argument("--rule", default=None, help="commit rule (default: the checkpoint's)")
args = ap.parse_args()
data = Path(args.data)
recs = [r for r in json.load(open(data)) if r["task"] == "detection"]
truth = [len(r["meta"]["boxes"]) for r in recs]
print(f"{len(recs)} images, {sum(truth)} boxes, {sum(truth) / len(recs):.2f} per image, "
      f"{sum(t == 0 for t in truth) / len(recs):.0%} without any")
for ck in args.checkpoints:
    cfg = DecodeConfig(commit_rule=args.rule) if args.rule else DecodeConfig()
    planner = Planner(load_model(ck), cfg)
    counts, by_truth = [], defaultdict(list)
    for r, t in zip(recs, truth):
        img = Image.open(data.parent / r["image"][0]).convert("RGB")
        res = planner.detect([img])
        n = len(res.detections) + res.dropped
        counts.append(n)
        by_truth[min(t, 4)].append(n)
    fewer = sum(n < t for n, t in zip(counts, truth)) / len(recs)
    empty = sum(n == 0 for n in counts) / len(recs)
    per = "  ".join(f"{k if k < 4 else '4+'}: {sum(v) / len(v):.2f} ({len(v)})"
                    for k, v in sorted(by_truth.items()))
    print(f"{ck} [{args.rule or 'checkpoint rule'}]: {sum(counts) / len(recs):.2f} boxes per "
          f"image, {empty:.0%} empty, {fewer:.0%} with fewer than the frame has; "
          f"mean written by true count: {per}")
