"""Does a model's detection answer depend on the image? First-token and first-coordinate
probabilities on a few frames with vehicles (and a black frame), teacher-forced.

    python scripts/detection_probe.py CHECKPOINT DATA_DIR [--frames 5]

Prints, per frame, P("[]") (the empty answer's first token) and the three likeliest first
digits of the first box after ``[{"bbox_2d": [``, then the largest difference between frames.
An AR checkpoint is probed by next-token prediction; a diffusion checkpoint by filling
its first answer block, fully masked, in one forward. The figures behind docs/training.md's
"Task mix" (in docs/history.md) were printed by this script.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from PIL import Image


def _probs(model, image, prefix: list[int]) -> torch.Tensor:
    """The model's distribution (V,) of the answer token after ``prefix``."""
    from wamdiff2_core.diffusion.layout import ar_inputs
    from wamdiff2_core.tasks import detection_prompt

    batch = model.processor.encode_prompts([detection_prompt()], [[image]])
    f = model.fields
    if f.paradigm == "ar":
        inputs = ar_inputs(model, batch, torch.tensor([prefix or [f.eoa_token_id]]))
        at = -1 if prefix else -2
    else:
        from wamdiff2_core.diffusion.layout import diffusion_inputs

        block = f.block_size
        x0 = torch.tensor([(prefix + [f.eoa_token_id] * block)[:block]])
        xt = x0.clone()
        xt[0, len(prefix):] = f.mask_token_id
        inputs = diffusion_inputs(model, batch, x0, xt, block)
        at = len(prefix) - block
    with torch.no_grad():
        logits = model.hf(input_ids=inputs.input_ids, attention_mask=inputs.mask,
                          position_ids=inputs.positions, use_cache=False,
                          **inputs.vision).logits[0, at]
    return logits.float().softmax(-1)


def probe_images(root: Path, frames: int) -> tuple[list[str], list[Image.Image]]:
    """Up to ``frames`` frames with boxes, spread evenly over a data set's detection records,
    and their images followed by a black frame of the same size (also used by
    scripts/vision_probe.py)."""
    records = [r for r in json.loads((root / "train.json").read_text())
               if r["task"] == "detection" and r["meta"]["boxes"]]
    step = max(1, len(records) // max(1, frames))
    paths = [r["image"][0] for r in records[::step][:frames]]
    images = [Image.open(root / p).convert("RGB") for p in paths]
    if images:
        images.append(Image.new("RGB", images[0].size))
    return paths, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("data")
    parser.add_argument("--frames", type=int, default=5)
    args = parser.parse_args()

    from wamdiff2_core.planner import load_model

    torch.set_num_threads(1)
    model = load_model(args.checkpoint)
    tok = model.processor.tokenizer
    _, images = probe_images(Path(args.data), args.frames)
    empty = tok.convert_tokens_to_ids("[]")
    box = tok.encode('[{"bbox_2d": [', add_special_tokens=False)
    firsts, digits = [], []
    for i, image in enumerate(images):
        p0, p1 = _probs(model, image, []), _probs(model, image, box)
        firsts.append(p0)
        digits.append(p1)
        top = p1.topk(3)
        name = "black" if i == len(images) - 1 else f"frame {i}"
        print(f"{name:8s} P([]) {float(p0[empty]):.3f}  first digit: " + ", ".join(
            f"{tok.decode([int(j)])!r} {float(v):.3f}" for v, j in zip(top.values, top.indices)))
    real = range(len(images) - 1)
    spread = max(float((digits[a] - digits[b]).abs().max()) for a in real for b in real)
    black = max(float((digits[a] - digits[-1]).abs().max()) for a in real)
    print(f"largest difference of the first-digit distribution: between frames {spread:.3f}, "
          f"frame vs black {black:.3f}")


if __name__ == "__main__":
    main()
