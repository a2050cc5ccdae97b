"""Scratch check (not part of the package): for 6 frames with boxes of seed 3000, the
probability of the empty answer `[]` at the first answer position as the decoder reads it (the
prefill's carry) and as the training layout [prefix | x0 | xt] reads it (every xt position
masked), for runs/exp/d3_conv/final, with the record's own prompt and tasks.detection_prompt().
    python layout_check.py"""
import json, torch
from pathlib import Path
from PIL import Image
import numpy as np
from wamdiff2_core import tasks
from wamdiff2_core.decoding.reference import _Context
from wamdiff2_core.model.prompt import prepare_prompt
from wamdiff2_core.planner import load_model
from wamdiff2_core.diffusion.layout import diffusion_inputs, diffusion_logits, kept_positions
from wamdiff2_core.training.objectives import run_forward
data = Path("data/val3000/det_half.json")
recs = [r for r in json.load(open(data)) if r["task"] == "detection" and r["meta"]["boxes"]][:6]
m = load_model("runs/exp/d3_conv/final"); m.hf.eval()
tok = m.processor.tokenizer; e = tok.encode("[]", add_special_tokens=False)[0]
for r in recs:
    img = np.asarray(Image.open(data.parent / r["image"][0]).convert("RGB"))
    human = r["conversations"][0]["value"]
    for name, prompt_text in (("record prompt", human), ("tasks.detection_prompt", tasks.detection_prompt())):
        batch = m.processor.encode_prompts([prompt_text], [[img]])
        with torch.no_grad():
            ctx = _Context(m, prepare_prompt(m, batch, 32), True)
            p_inf = torch.softmax(ctx.last_logits[0, -1], -1)[e].item()
            ans = torch.tensor([m.processor.encode_answer(r["conversations"][1]["value"], 32)])
            xt = torch.full_like(ans, m.fields.mask_token_id)
            inp = diffusion_inputs(m, batch, ans, xt, 32)
            lg = diffusion_logits(run_forward(m.hf, inp, kept_positions(ans.shape[1], True)), ans.shape[1], 32, True)
            p_tr = torch.softmax(lg[0, 0], -1)[e].item()
        print(f"{r['id']} {name}: P('[]') inference carry {p_inf:.3f}, training layout {p_tr:.3f}")
    print("same prompt text:", human == tasks.detection_prompt())
