"""An auxiliary training target for the vision tower: where the frame's boxes are.

Why: a vision tower trained from scratch on a few thousand simulator frames through the text
loss alone barely tells frames apart (the visual tokens of two frames differed by ~0.4% of
their norm in the bundle, docs/history.md 8112a94), and the detection answers are then
written from the data's prior, not the image (AP50 0-0.08 at every size tried). Here every
image that has a detection record gets a dense target besides the answer loss: a small head
on the merged visual tokens (what the language model reads) predicts, for each token, an
``S x S`` grid of sub-cells: whether a box covers the sub-cell and whether a box's centre lies
in it. The loss is binary cross-entropy; it reaches the tower only (and the merger), so the
tokens are made to carry where the vehicles are, at sub-token resolution.

The head is a training-time part only: it is kept in the training checkpoints' shards (keys
``aux/...``, to resume) but not in the planner-loadable model, which stays a plain Qwen3-VL
checkpoint.

Recipe keys (``vision_aux.*``): ``weight`` (0: off), ``subgrid`` (S), ``pos_weight`` (the
weight of a positive sub-cell in the cross-entropy; sub-cells covered by a box are ~3% of a
frame).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.tasks.detection import parse_detections

GRID = 1000.0


def boxes_by_image(samples) -> dict[str, list[tuple[float, float, float, float]]]:
    """Image path -> its boxes on the 0-1000 grid, read from the detection records (a
    one-image record whose answer parses; ``[]`` is a frame with no box). Images without
    such a record are absent: they get no auxiliary target."""
    out: dict[str, list] = {}
    for s in samples:
        if s.task != "detection" or len(s.images) != 1:
            continue
        try:
            dets = parse_detections(s.answer, GRID, GRID)
        except AnswerParseError:
            continue
        out[s.images[0]] = [tuple(float(v) for v in d.box) for d in dets]
    return out


CHANNELS = 6      # covered, centre, and the centred box's x1, y1, x2, y2 / 1000


def box_targets(boxes, rows: int, cols: int, sub: int) -> torch.Tensor:
    """(6, rows*sub, cols*sub) targets over a ``rows x cols`` token grid split into
    ``sub x sub`` sub-cells each: channel 0, a box covers the sub-cell (every sub-cell a box
    overlaps, at least one per box); channel 1, the sub-cell holds a box's centre; channels
    2-5, at a centre, that box's corners on the image as fractions (absolute: the token must
    carry where on the image it is, which is what an answer's coordinates need)."""
    h, w = rows * sub, cols * sub
    target = torch.zeros(CHANNELS, h, w)
    for x1, y1, x2, y2 in boxes:
        c1 = min(int(x1 / GRID * w), w - 1)
        c2 = max(c1 + 1, min(w, math.ceil(x2 / GRID * w)))
        r1 = min(int(y1 / GRID * h), h - 1)
        r2 = max(r1 + 1, min(h, math.ceil(y2 / GRID * h)))
        target[0, r1:r2, c1:c2] = 1.0
        cx = min(int((x1 + x2) / 2 / GRID * w), w - 1)
        cy = min(int((y1 + y2) / 2 / GRID * h), h - 1)
        target[1, cy, cx] = 1.0
        target[2:, cy, cx] = torch.tensor([x1, y1, x2, y2]) / GRID
    return target


def target_loss(pred: torch.Tensor, target: torch.Tensor,
                pos_weight: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the covered and centre maps, plus the L1 error of the corners
    predicted at the centres (0 for a frame without boxes), measured in sub-cells: a corner
    one sub-cell off costs 1 (as fractions of the image it would cost ~0.02, too little
    beside the cross-entropy for the corners to be learnt at all)."""
    bce = nn.functional.binary_cross_entropy_with_logits(
        pred[:2], target[:2], pos_weight=pos_weight.to(pred.device))
    centres = target[1] > 0
    if not centres.any():
        return bce
    h, w = target.shape[1:]
    cells = torch.tensor([w, h, w, h], dtype=pred.dtype, device=pred.device).unsqueeze(1)
    return bce + ((pred[2:, centres] - target[2:, centres]).abs() * cells).mean()


class VisionAuxHead(nn.Module):
    """Merged visual token (dim) -> CHANNELS x sub x sub outputs."""

    def __init__(self, dim: int, sub: int):
        super().__init__()
        self.sub = sub
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, CHANNELS * sub * sub)

    def forward(self, tokens: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        """(rows*cols, dim) tokens in raster order -> (CHANNELS, rows*sub, cols*sub)."""
        s = self.sub
        x = self.proj(self.norm(tokens)).view(rows, cols, CHANNELS, s, s)
        return x.permute(2, 0, 3, 1, 4).reshape(CHANNELS, rows * s, cols * s)


class VisionTap:
    """A forward hook on the vision tower that keeps the merged tokens of its last call."""

    def __init__(self, visual: nn.Module):
        self.tokens: torch.Tensor | None = None
        self.merge = int(getattr(visual, "spatial_merge_size", 2))
        self._handle = visual.register_forward_hook(self._hook)

    def _hook(self, module, args, output) -> None:
        pooled = getattr(output, "pooler_output", None)
        self.tokens = pooled if torch.is_tensor(pooled) else None

    def clear(self) -> None:
        self.tokens = None

    def remove(self) -> None:
        self._handle.remove()


class VisionAux:
    """The head, the tap and the per-sample loss for one student model."""

    def __init__(self, model, weight: float, sub: int, pos_weight: float, seed: int = 0):
        visual = model.hf.model.visual
        dim = int(model.hf.config.vision_config.out_hidden_size)
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed + 0x5EE)          # the head's initialisation: from the seed
        self.head = VisionAuxHead(dim, sub).to(model.device)
        torch.random.set_rng_state(gen_state)
        self.tap = VisionTap(visual)
        self.weight, self.sub = weight, sub
        self.pos_weight = torch.tensor(pos_weight)
        self.index: dict[str, list] = {}

    def set_samples(self, samples) -> None:
        self.index = boxes_by_image(samples)

    def coverage(self, samples) -> float:
        """The share of ``samples`` whose image has a target."""
        if not samples:
            return 0.0
        return sum(len(s.images) == 1 and s.images[0] in self.index
                   for s in samples) / len(samples)

    def loss(self, images: list[tuple[str, ...]], grids: torch.Tensor) -> torch.Tensor:
        """(B,) auxiliary loss per sample (0 for a sample without a target) from the tokens
        the tap kept in the student's last forward; ``images``: each sample's image paths,
        ``grids``: the batch's image_grid_thw."""
        tokens = self.tap.tokens
        out = torch.zeros(len(images), device=self.head.proj.weight.device)
        if tokens is None or not len(grids):
            return out
        m = self.tap.merge
        counts = [int(t * (h // m) * (w // m)) for t, h, w in grids.tolist()]
        if sum(counts) != tokens.shape[0]:
            raise RuntimeError(f"vision aux: {tokens.shape[0]} visual tokens for grids "
                               f"{grids.tolist()}")
        per_image = torch.split(tokens, counts)
        k, losses = 0, []
        for row, paths in enumerate(images):
            for j, path in enumerate(paths):
                t, h, w = grids[k + j].tolist()
                boxes = self.index.get(path) if len(paths) == 1 and t == 1 else None
                if boxes is None:
                    continue
                rows, cols = h // m, w // m
                pred = self.head(per_image[k + j], rows, cols).float()
                target = box_targets(boxes, rows, cols, self.sub).to(pred.device)
                losses.append((row, target_loss(pred, target, self.pos_weight)))
            k += len(paths)
        if losses:
            rows = torch.tensor([r for r, _ in losses], device=out.device)
            out = out.index_put((rows,), torch.stack([v for _, v in losses]))
        return out


class VisionAuxObjective:
    """Wraps a stage's objective: its loss plus ``weight`` x the auxiliary loss."""

    def __init__(self, inner, aux: VisionAux):
        self.inner, self.aux = inner, aux

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, module, batch, step: int):
        self.aux.tap.clear()
        out = self.inner(module, batch, step)
        images = batch.images or [()] * batch.size
        grids = batch.prompt.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long))
        aux = self.aux.loss(images, grids).to(out.loss.device)
        out.loss = out.loss + self.aux.weight * aux
        out.metrics["vision_aux"] = aux.detach()
        return out
