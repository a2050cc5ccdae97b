"""What a recipe builds before training: the student, the teacher, the vision aux head, the
optimizer's parameter groups and the learning-rate schedule."""
from __future__ import annotations

import math

import torch

from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.model.presets import is_preset
from wamdiff2_core.training.config import Recipe, RecipeError
from wamdiff2_core.training.validate import effective_block_size
from wamdiff2_core.training.vision_aux import VisionAux

def build_student(recipe: Recipe, device: torch.device) -> Wamdiff2Model:
    """The model a recipe starts from: a preset, or a checkpoint with the recipe's fields
    (and ``model.max_pixels`` / ``model.min_pixels``, when set, as its image budget). A
    recipe that never shows the lateral status (``data.lateral_status_dropout: 1.0``) makes
    a model whose planner leaves it out too (``DiffusionFields.lateral_status``)."""
    m = recipe.model
    bsz = effective_block_size(recipe)
    if is_preset(m.init):
        model = Wamdiff2Model.from_preset(m.init, paradigm=m.paradigm, block_size=bsz,
                                          seed=m.seed, device=device)
    else:
        model = Wamdiff2Model.from_pretrained(m.init, device=device)
    if m.max_pixels or m.min_pixels:
        high = m.max_pixels or model.processor.config.max_pixels
        if m.min_pixels > high:
            raise RecipeError(f"model.min_pixels ({m.min_pixels}) exceeds the image budget "
                              f"of {m.init} ({high} pixels): set model.max_pixels too")
        model = model.with_max_pixels(high, m.min_pixels or None)
    shift = m.paradigm == "diffusion" and (
        m.prediction == "shifted" if m.prediction
        else model.fields.shift and model.fields.paradigm == "diffusion")
    f = model.fields
    return model.with_fields(source="recipe", paradigm=m.paradigm, block_size=bsz,
                             lateral_status=recipe.data.lateral_status_dropout < 1.0,
                             shift=shift,
                             decode_commit_rule=m.decode_commit_rule or f.decode_commit_rule,
                             decode_threshold=m.decode_threshold or f.decode_threshold,
                             cameras=recipe.data.cameras)


def load_teacher(recipe: Recipe, device: torch.device) -> Wamdiff2Model | None:
    """The frozen distillation teacher (no gradients, eval mode), or None; in bf16 under
    ``train.precision: bf16`` (it is never trained, so its fp32 weights would only take
    memory)."""
    if recipe.objective != "distill":
        return None
    dtype = torch.bfloat16 if recipe.train.precision == "bf16" else torch.float32
    teacher = Wamdiff2Model.from_pretrained(recipe.distill.teacher, device=device, dtype=dtype)
    teacher.hf.requires_grad_(False)
    return teacher


def param_groups(model: Wamdiff2Model, recipe: Recipe,
                 aux: VisionAux | None = None) -> list[dict]:
    """AdamW groups: vision tower vs the rest, each split into decayed (matrices) and
    not decayed (norms, biases); with ``aux``, its head last, at the vision tower's rate."""
    o = recipe.optim
    visual = {id(p) for p in model.hf.model.visual.parameters()}
    groups: dict[tuple[bool, bool], list] = {}
    for p in model.hf.parameters():
        if p.requires_grad:
            groups.setdefault((id(p) in visual, p.ndim >= 2), []).append(p)
    out = []
    for (vis, decay), params in sorted(groups.items()):
        out.append({"params": params, "lr": o.vision_lr if vis else o.lr,
                    "weight_decay": o.weight_decay if decay else 0.0,
                    "name": f"{'vision' if vis else 'text'}{'' if decay else '_nodecay'}"})
    if aux is not None:
        out.append({"params": list(aux.head.parameters()), "lr": o.vision_lr,
                    "weight_decay": 0.0, "name": "vision_aux"})
    return out


def make_aux(recipe: Recipe, model: Wamdiff2Model) -> VisionAux | None:
    """The vision tower's auxiliary head and tap (``vision_aux.weight`` > 0), or None."""
    va = recipe.vision_aux
    if not va.weight:
        return None
    return VisionAux(model, va.weight, va.subgrid, va.pos_weight, recipe.train.seed)


def lr_lambda(recipe: Recipe):
    """Multiplier of the base learning rate at step s: linear warm-up, then cosine down to
    ``min_lr_ratio``."""
    o, total = recipe.optim, recipe.train.steps

    def fn(step: int) -> float:
        if step < o.warmup_steps:
            return (step + 1) / (o.warmup_steps + 1)
        span = max(1, total - o.warmup_steps)
        progress = min(1.0, (step - o.warmup_steps) / span)
        return o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return fn
