"""Scratch probe (not part of the package): the probability a checkpoint gives the empty
answer (the token ``[]``, a single token of the bundled BPE; a list with boxes starts with
``[{"``) as the first answer token, on each frame of a detection records file, split by
whether the frame has any box. An AR model and a shifted block-diffusion model both read it
at the prompt's last position; an unshifted one at the first block's position 0 with the
whole block masked.
    python empty_probe.py DATA.json CHECKPOINT [CHECKPOINT ...]"""
import json, sys
from pathlib import Path

import torch
from PIL import Image

from wamdiff2_core import tasks
from wamdiff2_core.decoding.reference import _Context
from wamdiff2_core.model import masks
from wamdiff2_core.model.prompt import prepare_prompt
from wamdiff2_core.planner import load_model

data = Path(sys.argv[1])
recs = [r for r in json.load(open(data)) if r["task"] == "detection"]
for ck in sys.argv[2:]:
    model = load_model(ck)
    tok = model.processor.tokenizer
    empty_id = tok.encode("[]", add_special_tokens=False)
    assert len(empty_id) == 1, empty_id
    bsz = 1 if model.fields.paradigm == "ar" else model.fields.block_size
    p_empty = {True: [], False: []}
    with torch.no_grad():
        for r in recs:
            img = Image.open(data.parent / r["image"][0]).convert("RGB")
            batch = model.processor.encode_prompts([tasks.detection_prompt()], [[img]])
            prompt = prepare_prompt(model, batch, bsz)
            ctx = _Context(model, prompt, True)
            logits = ctx.last_logits[:, -1]
            if bsz > 1 and not model.fields.shift:
                x = torch.full((1, bsz), model.fields.mask_token_id)
                types, blocks = prompt.answer_layout(0, bsz, masks.NOISY)
                logits = ctx.logits(x, types, blocks, prompt.answer_positions(0, bsz),
                                    keep=False)[:, 0]
            p = torch.softmax(logits.float(), -1)[0, empty_id[0]].item()
            p_empty[len(r["meta"]["boxes"]) > 0].append(p)
    mean = lambda v: sum(v) / len(v)
    print(f"{ck}: P('[]') mean {mean(p_empty[False]):.3f} on the {len(p_empty[False])} frames "
          f"without boxes, {mean(p_empty[True]):.3f} on the {len(p_empty[True])} with boxes; "
          f"> 0.5 on {sum(p > 0.5 for p in p_empty[False])} / {sum(p > 0.5 for p in p_empty[True])}")
