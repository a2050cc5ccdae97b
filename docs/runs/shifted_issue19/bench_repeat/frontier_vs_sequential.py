# Scratch record (2026-12-03, docs/decoding.md "What the threshold trades"): each planning record
# decoded by the reference decoder with the frontier rule and with the sequential rule, printed
# side by side with the first character where they differ. From the repository root:
#   python docs/runs/shifted_issue19/bench_repeat/frontier_vs_sequential.py data/val3000/quarter.json 20 [0.95]
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from waypoint_error import planning_records, plan_record  # noqa: E402
from wamdiff2_core.decoding.config import DecodeConfig  # noqa: E402
from wamdiff2_core.planner import Planner  # noqa: E402

data, n = sys.argv[1], int(sys.argv[2])
threshold = float(sys.argv[3]) if len(sys.argv) > 3 else 0.95
records, images = planning_records(data, n)
planner = Planner.from_pretrained('wamdiff2_core/assets/default_model')
rules = {name: planner.reconfigure(decode=cfg, backend='reference', checkpoint_rule=False)
         for name, cfg in (('seq', DecodeConfig(commit_rule='sequential', steps_per_block=32,
                                                constrained=False)),
                           ('fro', DecodeConfig(commit_rule='low_confidence_frontier',
                                                threshold=threshold, constrained=False)))}
sums, pairs, differ = {'seq': 0.0, 'fro': 0.0}, 0, 0
for i, (record, image) in enumerate(zip(records, images)):
    out = {name: plan_record(p, record, image)[:2] for name, p in rules.items()}
    for name, (text, error) in out.items():
        print(i, name, text, error)
    (ts, a), (tf, b) = out['seq'], out['fro']
    if ts != tf:
        differ += 1
        k = len(os.path.commonprefix([ts, tf]))
        print('   first diff at char', k, repr(ts[max(0, k - 6):k + 6]), repr(tf[max(0, k - 6):k + 6]))
    if a is not None and b is not None:
        sums['seq'] += a
        sums['fro'] += b
        pairs += 1
print('differ', differ, 'of', len(records), f'mean L2 on the {pairs} frames where both parse: seq',
      sums['seq'] / max(pairs, 1), 'frontier', sums['fro'] / max(pairs, 1))
