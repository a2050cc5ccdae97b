"""How much do a checkpoint's visual tokens differ between camera frames? Runs the vision
tower on a few frames of a data set (and a black frame) and prints, per stage (patch
embedding, each block, the merger), the mean distance between two frames' tokens at the
same position, the mean distance of a frame's tokens from their own mean, and the distance
from the black frame's tokens, each divided by the mean token norm.

    python scripts/vision_probe.py CHECKPOINT DATA_DIR [--frames 3]

Small "between" against "within" means the tower sees every frame alike, so what the
language model can read from a picture is mostly where a token sits, not what is in it.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from detection_probe import probe_images     # scripts/ is on sys.path when run as a script


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("data", type=Path, help="generated data set directory")
    parser.add_argument("--frames", type=int, default=3)
    args = parser.parse_args(argv)

    from wamdiff2_core.planner import load_model
    from wamdiff2_core.tasks import detection_prompt

    torch.set_num_threads(1)
    model = load_model(args.checkpoint)
    tower = model.hf.model.visual
    paths, images = probe_images(args.data, args.frames)      # the black frame last
    if len(paths) < 2:
        parser.error("need at least two frames with boxes")

    stages = [("patch_embed", tower.patch_embed)] + \
        [(f"block {i}", b) for i, b in enumerate(tower.blocks)] + [("merger", tower.merger)]
    acts: dict[str, list[torch.Tensor]] = {name: [] for name, _ in stages}
    hooks = [mod.register_forward_hook(
        lambda _m, _i, out, name=name: acts[name].append(
            (out[0] if isinstance(out, tuple) else out).detach().float()))
        for name, mod in stages]
    with torch.no_grad():
        for image in images:
            batch = model.processor.encode_prompts([detection_prompt()], [[image]])
            tower(batch["pixel_values"], grid_thw=batch["image_grid_thw"])
    for h in hooks:
        h.remove()
    print(f"{len(paths)} frames of {args.data}: {', '.join(paths)}")
    print(f"{'stage':<12} {'tokens':>7} {'between':>8} {'within':>7} {'vs black':>9}")
    for name, out in acts.items():
        frames, black = torch.stack(out[:-1]), out[-1]
        norm = frames.norm(dim=-1).mean()
        between = torch.stack([(frames[i] - frames[j]).norm(dim=-1).mean()
                               for i in range(len(frames)) for j in range(i)]).mean() / norm
        within = (frames - frames.mean(1, keepdim=True)).norm(dim=-1).mean() / norm
        vs_black = (frames - black).norm(dim=-1).mean() / norm
        print(f"{name:<12} {frames.shape[1]:>7} {between:>8.3f} {within:>7.3f} {vs_black:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
