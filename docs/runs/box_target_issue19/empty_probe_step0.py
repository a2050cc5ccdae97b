"""Scratch probe (not part of the package): empty_probe.py's P('[]') for the AR teacher
runs/exp/d3_sub2k/final itself, its prompt laid out causally (blocks of 1, as it was trained)
and in blocks of 32 (the block-32 student's layout at step 0 of a conversion).
    python empty_probe_step0.py      (reads data/val3000/det_half.json)"""
import json, torch, sys
from pathlib import Path
from PIL import Image
from wamdiff2_core import tasks
from wamdiff2_core.decoding.reference import _Context
from wamdiff2_core.model.prompt import prepare_prompt
from wamdiff2_core.planner import load_model
data = Path("data/val3000/det_half.json")
recs = [r for r in json.load(open(data)) if r["task"] == "detection"]
m = load_model("runs/exp/d3_sub2k/final")
e = m.processor.tokenizer.encode("[]", add_special_tokens=False)[0]
for bs in (1, 32):
    res = {True: [], False: []}
    with torch.no_grad():
        for r in recs:
            img = Image.open(data.parent / r["image"][0]).convert("RGB")
            batch = m.processor.encode_prompts([tasks.detection_prompt()], [[img]])
            ctx = _Context(m, prepare_prompt(m, batch, bs), True)
            res[bool(r["meta"]["boxes"])].append(torch.softmax(ctx.last_logits[0, -1], -1)[e].item())
    print(f"AR weights, prompt laid out in blocks of {bs}: P('[]') {sum(res[False])/len(res[False]):.3f} without boxes, {sum(res[True])/len(res[True]):.3f} with")
