# Scratch record (2026-12-03, docs/decoding.md "What the threshold trades"): the frontier rule with
# threshold commits held to the W positions after a block's first masked one, patched into the
# reference decoder; mean waypoint error over the 8 waypoints and tokens per forward (every
# forward, commit passes included, as bench decode counts them) on planning records. From the
# repository root:
#   python docs/runs/shifted_issue19/bench_repeat/commit_window.py data/val3000/quarter.json 60 0.95 32,16
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from waypoint_error import planning_records, plan_record  # noqa: E402
from wamdiff2_core.decoding import reference, remasking  # noqa: E402
from wamdiff2_core.decoding.config import DecodeConfig  # noqa: E402
from wamdiff2_core.planner import Planner  # noqa: E402

data, n, threshold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
windows = [int(w) for w in sys.argv[4].split(',')]
records, images = planning_records(data, n)
planner = Planner.from_pretrained('wamdiff2_core/assets/default_model')
window = windows[0]


def windowed_commit_mask(rule, confidence, masked, quota, last, thr):
    commit = remasking.commit_mask(rule, confidence, masked, quota, last, thr)
    if rule != 'low_confidence_frontier':
        return commit
    index = torch.arange(masked.shape[-1])
    first = torch.where(masked, index, masked.shape[-1]).min(-1, keepdim=True).values
    return commit & ((index < first + window) | last)


reference.commit_mask = windowed_commit_mask
for window in windows:
    cfg = DecodeConfig(commit_rule='low_confidence_frontier', threshold=threshold, constrained=False)
    p = planner.reconfigure(decode=cfg, backend='reference', checkpoint_rule=False)
    errors, unparsed, tokens, forwards = [], 0, 0, 0
    for record, image in zip(records, images):
        _, error, stats = plan_record(p, record, image)
        if error is None:
            unparsed += 1
        else:
            errors.append(error)
        tokens += stats.tokens
        forwards += stats.forwards
    print(f"W={window} thr={threshold}: mean L2 {sum(errors) / len(errors):.3f} on {len(errors)} "
          f"parsed, unparsed {unparsed}, forwards {forwards}, tokens {tokens}, "
          f"tok/fwd {tokens / max(forwards, 1):.2f}", flush=True)
