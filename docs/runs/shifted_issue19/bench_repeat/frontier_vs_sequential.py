# Scratch record (2026-12-03, docs/decoding.md "What the threshold trades"): each planning record
# decoded by the reference decoder with the frontier rule and with the sequential rule, printed
# side by side with the first character where they differ. From the repository root:
#   python docs/runs/shifted_issue19/bench_repeat/frontier_vs_sequential.py data/val3000/quarter.json 20
import json, sys, torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from waypoint_error import l2
from wamdiff2_core.planner import Planner
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding import reference as R
from wamdiff2_core.evaluation.open_loop import load_image
from wamdiff2_core import tasks
data = sys.argv[1]; n = int(sys.argv[2])
recs = [r for r in json.load(open(data)) if r['task']=='planning'][:n]
root = Path(data).parent
pl = Planner.from_pretrained('wamdiff2_core/assets/default_model', checkpoint_rule=True)
log = []  # the commit masks of the last decode (kept for inspection)
orig = R.commit_mask
def spy(rule, conf, masked, quota, last, thr):
    c = orig(rule, conf, masked, quota, last, thr)
    log.append((conf.clone(), masked.clone(), c.clone()))
    return c
R.commit_mask = spy
from wamdiff2_core.evaluation.predictors import _plan
import wamdiff2_core.planner as P
def run(cfg, rec):
    log.clear()
    p2 = pl.reconfigure(decode=cfg, backend='reference', checkpoint_rule=False)
    img = load_image(rec, root)
    t = _plan(p2, rec, [img])
    return t, list(log)
seq = DecodeConfig(commit_rule='sequential', steps_per_block=32, constrained=False, threshold=0.95)
fr = DecodeConfig(commit_rule='low_confidence_frontier', threshold=float(sys.argv[3]) if len(sys.argv)>3 else 0.95, constrained=False)
tok = pl.model.processor.tokenizer
tot=[0,0]; nd=0
for i, rec in enumerate(recs):
    ts, _ = run(seq, rec)
    tf, lg = run(fr, rec)
    a, b = l2(ts, rec), l2(tf, rec)
    print(i, 'seq', ts, a); print(i, 'fro', tf, b)
    if ts != tf:
        nd += 1
        # first differing char
        k = next(j for j in range(min(len(ts),len(tf))) if ts[j]!=tf[j]) if any(ts[j]!=tf[j] for j in range(min(len(ts),len(tf)))) else min(len(ts),len(tf))
        print('   first diff at char', k, repr(ts[max(0,k-6):k+6]), repr(tf[max(0,k-6):k+6]))
    if a is not None and b is not None: tot[0]+=a; tot[1]+=b
print('differ', nd, 'of', len(recs), 'mean L2 seq', tot[0]/len(recs), 'frontier', tot[1]/len(recs))
