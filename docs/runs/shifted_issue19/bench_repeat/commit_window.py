# Scratch record (2026-12-03, docs/decoding.md "What the threshold trades"): the frontier rule with
# threshold commits held to the W positions after a block's first masked one, patched into the
# reference decoder; mean waypoint error over the 8 waypoints and tokens per forward on planning
# records. Run from the repository root:
#   python docs/runs/shifted_issue19/bench_repeat/commit_window.py data/val3000/quarter.json 60 0.95 32,16
import json, sys, math, time, torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from waypoint_error import l2
from wamdiff2_core.planner import Planner
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding import reference as R
from wamdiff2_core.decoding import remasking as RM
from wamdiff2_core.evaluation.open_loop import load_image

data = sys.argv[1]; n = int(sys.argv[2]); thr = float(sys.argv[3]); Ws = [int(w) for w in sys.argv[4].split(',')]
recs = [r for r in json.load(open(data)) if r['task']=='planning'][:n]
root = Path(data).parent
pl = Planner.from_pretrained('wamdiff2_core/assets/default_model', checkpoint_rule=True)
W = [32]
orig = RM.low_confidence_frontier
def windowed(conf, masked, quota, last, threshold):
    c = orig(conf, masked, quota, last, threshold)
    K = masked.shape[-1]
    idx = torch.arange(K)
    first = torch.where(masked, idx, K).min(-1, keepdim=True).values
    return c & ((idx < first + W[0]) | last)
R.commit_mask = lambda rule, conf, masked, quota, last, thr: windowed(conf, masked, quota, last, thr) if rule=='low_confidence_frontier' else RM.commit_mask(rule, conf, masked, quota, last, thr)
imgs = [load_image(r, root) for r in recs]
for w in Ws:
    W[0] = w
    cfg = DecodeConfig(commit_rule='low_confidence_frontier', threshold=thr, constrained=False)
    p2 = pl.reconfigure(decode=cfg, backend='reference', checkpoint_rule=False)
    from wamdiff2_core.evaluation import predictors
    ls=[]; toks=0; fw=0; bad=0
    for rec, im in zip(recs, imgs):
        res = predictors.timed_answer(lambda: p2.plan(predictors.Observation(images=[im], **{k:v for k,v in predictors.parse_planning_prompt(predictors.record_prompt_and_answer(rec)[0]).items() if k in ('command','velocity','acceleration','position')})))
        t = res.text; st = res.stats
        v = l2(t, rec)
        if v is None: bad+=1
        else: ls.append(v)
        toks += st.tokens if hasattr(st,'tokens') else 0; fw += st.forwards
    print(f"W={w} thr={thr}: mean L2 {sum(ls)/len(ls):.3f} on {len(ls)} parsed, unparsed {bad}, denoise fwds {fw}, tokens {toks}, tok/fwd {toks/max(fw,1):.2f}", flush=True)
