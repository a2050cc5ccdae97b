"""The trainer: one loop for every stage (the objective is the only thing that changes).

One optimizer step = one global batch of ``train.global_batch`` samples, split over processes
(each takes its slice) and accumulation micro-steps. The loss is the sum of per-sample losses
divided by the global batch size, so 1 process and N processes with the same global batch
compute the same loss and gradients (up to float summation order). AdamW with its own learning
rate for the vision tower, linear warm-up then cosine decay, gradient clipping, bf16 autocast.
Checkpoints every ``output.save_every`` steps (atomic; see ``checkpoint.py``); ``resume=True``
continues the newest complete checkpoint of ``output.dir`` bit-for-bit in data order and noise.
A damaged newest checkpoint is reported and the previous one is used; a step whose loss or
gradient norm is not finite stops the run before the optimizer touches the weights.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path

import torch
import yaml
from transformers.utils import logging as hf_logging

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.model.config import set_fields
from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model
from wamdiff2_core.model.presets import is_preset
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.config import Recipe, RecipeError
from wamdiff2_core.training.data import (BatchMaker, GlobalOrder, group_keys, key_task,
                                         load_samples, shard)
from wamdiff2_core.training.data_check import check_images
from wamdiff2_core.training.distributed import DistContext, no_sync, resolve_strategy, wrap
from wamdiff2_core.training.metrics import MetricsLog, Progress
from wamdiff2_core.training.objectives import build_objective
from wamdiff2_core.training.validate import effective_block_size, validate
from wamdiff2_core.training.vision_aux import VisionAux, VisionAuxObjective

FINAL_DIR = "final"
hf_logging.disable_progress_bar()


class TrainingError(RuntimeError):
    """A run that cannot go on (a loss that is not finite); one sentence, nothing saved."""


class ClipWatch:
    """Says once, after the first ``window`` steps of a run, when the gradient clip bound
    on nearly all of them in a diffusion-stage run whose batches are length-bucketed.

    A clipped step moves the weights by the same length whatever its gradient's norm, so
    each batch weighs 1 / its norm. Length buckets make that weight depend on the answers:
    on the simulator's detection data the shortest bucket is 77% ``[]`` answers with about
    half the gradient norm of the others, and block-32 conversions trained so (a box target
    on: norms ~90 against a clip of 1) learnt to answer ``[]`` to frames with cars
    (docs/training.md, "Length buckets under a clip that always binds"). AR runs under the
    same clip kept the data's rate of empty answers, so they are not watched."""

    def __init__(self, recipe: Recipe, window: int = 50, share: float = 0.9):
        d, clip = recipe.data, recipe.optim.grad_clip
        self.clip, self.bucket, self.window, self.share = clip, d.length_bucket, window, share
        self.active = (recipe.objective != "ar" and clip > 0 and d.group_by_task
                       and d.length_bucket > 0)
        self.seen = self.over = 0

    def observe(self, grad_norm: float) -> str | None:
        """Counts one step's gradient norm (before clipping); the warning, once, or None."""
        if not self.active:
            return None
        self.seen += 1
        self.over += grad_norm > self.clip
        if self.seen < self.window:
            return None
        self.active = False
        if self.over < self.share * self.seen:
            return None
        return (f"the gradient norm was above optim.grad_clip={self.clip:g} on "
                f"{self.over} of the first {self.seen} steps, so every step is scaled to "
                f"the same length and each length-bucketed batch (data.length_bucket="
                f"{self.bucket}) weighs 1 / its norm: batches of short answers, detection's "
                f"'[]' among them, count more than long ones, which taught block-32 "
                f"conversions to answer '[]' (docs/training.md, \"Length buckets under a "
                f"clip that always binds\"); optim.grad_clip=0 (or above the run's norms) "
                f"or data.length_bucket=0 avoids it")


def build_student(recipe: Recipe, device: torch.device) -> Wamdiff2Model:
    """The model a recipe starts from: a preset, or a checkpoint with the recipe's fields
    (and ``model.max_pixels`` / ``model.min_pixels``, when set, as its image budget). A recipe that never shows the
    lateral status (``data.lateral_status_dropout: 1.0``) makes a model whose planner leaves
    it out too (``DiffusionFields.lateral_status``)."""
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
    """The frozen distillation teacher (no gradients, eval mode), or None."""
    if recipe.objective != "distill":
        return None
    teacher = Wamdiff2Model.from_pretrained(recipe.distill.teacher, device=device)
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


# Keys that may change between a run and its resumption (they do not change the results).
RESUMABLE_CHANGES = ("output.", "train.threads", "train.micro_batch", "train.strategy")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_same_run(saved: dict, current: dict, path: Path) -> None:
    """RecipeError naming the first key in which ``current`` differs from the recipe of the
    checkpoint being resumed (output paths, threads and the batch split may differ)."""
    a, b = _flatten(saved), _flatten(current)
    for key in sorted(set(a) | set(b)):
        if key.startswith(RESUMABLE_CHANGES):
            continue
        if a.get(key) != b.get(key):
            raise RecipeError(f"cannot resume {path}: recipe key '{key}' was {a.get(key)!r} "
                              f"and is now {b.get(key)!r}")


class Trainer:
    """Runs one recipe to completion; ``run()`` returns the final checkpoint directory."""

    def __init__(self, recipe: Recipe, resume: bool = False, log=print, warn=None):
        self.ctx = DistContext.from_env()
        validate(recipe, self.ctx.world)
        quiet = not self.ctx.is_main
        self.recipe, self.log = recipe, (lambda *a, **k: None) if quiet else log
        self.warn = (lambda *a: None) if quiet else warn or _warn
        self.out = Path(recipe.output.dir)
        t = recipe.train
        if t.threads:
            torch.set_num_threads(t.threads)
        if ckpt.step_dirs(self.out) and not resume:
            raise RecipeError(f"output.dir '{self.out}' already holds checkpoints; pass "
                              f"--resume to continue that run or choose another output.dir")
        # data first: a bad record or image fails before any weight is loaded
        samples = load_samples(recipe.data.path, recipe.data.split, recipe.data.tasks,
                               recipe.data.limit, recipe.data.cameras)
        check_images(samples, f"data set {recipe.data.path}",
                     recipe.output.progress and self.ctx.is_main)
        self.start_step, self.resume_from, state = 0, None, None
        self.aux: VisionAux | None = None
        device = self.ctx.device
        if resume:
            state, self.model = self._resumable(device)
        if state is not None:
            self.resume_from, self.start_step = state.path, state.step
        else:
            self.model = build_student(recipe, device)
            self.aux = make_aux(recipe, self.model)
        self.teacher = load_teacher(recipe, device)
        self.block = effective_block_size(recipe)
        self.batches = BatchMaker(samples, self.model.processor, self.block,
                                  recipe.data.max_answer_tokens, t.loss_norm,
                                  recipe.data.lateral_status_dropout, t.seed)
        kept = self.batches.samples
        tasks = sorted({s.task for s in kept})
        left_out = (lambda task: bool(recipe.data.tasks) and task not in recipe.data.tasks)
        unknown = sorted(t for t in recipe.data.task_weights
                         if t not in tasks and not left_out(t))     # a typo, not data.tasks
        if unknown:
            raise RecipeError(f"data.task_weights names task '{unknown[0]}' but the kept "
                              f"records are of tasks {tasks}")
        keys = (group_keys(kept, self.batches.answer_ids, recipe.data.length_bucket)
                if recipe.data.group_by_task else None)
        weights = {k: recipe.data.task_weights.get(key_task(k), 1.0) for k in set(keys or ())}
        self.order = GlobalOrder(len(kept), t.global_batch, t.seed, keys, weights)
        self.objective = build_objective(recipe, self.model, self.teacher)
        if self.aux is not None:
            self.aux.set_samples(samples)       # every record's boxes, long answers too
            self.objective = VisionAuxObjective(self.objective, self.aux)
        self.model.hf.train()
        self.strategy = resolve_strategy(t.strategy, self.ctx)
        self.module = wrap(self.model.hf, self.strategy, self.ctx)
        self.optimizer = torch.optim.AdamW(param_groups(self.model, recipe, self.aux),
                                           betas=tuple(recipe.optim.betas))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(recipe))
        if state is not None:
            self._restore(state)
        self.micro = t.micro_batch
        self.accum = t.global_batch // (t.micro_batch * self.ctx.world)
        self.autocast = (torch.autocast(device.type, dtype=torch.bfloat16)
                         if t.precision == "bf16" else contextlib.nullcontext())

    # ------------------------------------------------------------------ resume
    def _resumable(self, device: torch.device
                   ) -> tuple[ckpt.ResumeState | None, Wamdiff2Model | None]:
        """The state and model of the newest checkpoint that reads whole; each damaged newer
        one is reported and the previous one tried. (None, None) when there is no checkpoint
        at all; RecipeError when there are some and every one is damaged."""
        found = ckpt.step_dirs(self.out)
        damaged = []
        for _, path in reversed(found):
            try:
                state = ckpt.read_resume_state(path, self.ctx.rank)
                check_same_run(state.recipe, self.recipe.to_dict(), path)
                model = Wamdiff2Model.from_pretrained(path / ckpt.MODEL_DIR, device=device)
                aux = make_aux(self.recipe, model)
                if aux is not None:
                    aux.load(path)
                groups = param_groups(model, self.recipe, aux)
                ckpt.check_optimizer_state(state.optimizer, [g["params"] for g in groups])
            except (ckpt.CheckpointDamaged, CheckpointError, FileNotFoundError) as exc:
                damaged.append(f"{path.name}: {exc}")
                self.warn(f"checkpoint {path} is damaged ({exc}); trying the one before it")
                continue
            self.aux = aux
            return state, model
        if found:
            raise RecipeError(f"cannot resume {self.out}: no checkpoint is complete "
                              f"({'; '.join(damaged)}); move {self.out / 'checkpoints'} "
                              f"away to start again")
        self.log(f"no checkpoint in {self.out}: starting at step 0")
        return None, None

    # ------------------------------------------------------------------ state
    def _restore(self, state: ckpt.ResumeState) -> None:
        self.optimizer.load_state_dict(state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        ckpt.set_rng(state.rng)
        self.log(f"resumed from {state.path} at step {state.step}")

    def _save_model(self, folder: Path) -> None:
        """The planner-loadable model directory (rank 0 writes; FSDP gathers first)."""
        if self.strategy == "fsdp":
            from torch.distributed.fsdp import FullStateDictConfig
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp import StateDictType

            cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
            with FSDP.state_dict_type(self.module, StateDictType.FULL_STATE_DICT, cfg):
                sd = self.module.state_dict()
            if self.ctx.is_main:
                folder.mkdir(parents=True, exist_ok=True)
                set_fields(self.model.hf.config, self.model.fields)
                self.model.hf.save_pretrained(str(folder), state_dict=sd)
                self.model.processor.save_pretrained(folder)
        elif self.ctx.is_main:
            self.model.save_pretrained(folder)

    def _optimizer_state(self) -> dict:
        if self.strategy == "fsdp":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            return FSDP.optim_state_dict(self.module, self.optimizer)
        return self.optimizer.state_dict()

    def save_checkpoint(self, step: int) -> Path:
        """Write checkpoint ``step`` atomically (every process takes part)."""
        root = self.out / "checkpoints"
        final = root / ckpt.step_dir_name(step)
        tmp = root / f".tmp-{final.name}"
        if self.ctx.is_main:
            ckpt.begin_dir(final)
        self.ctx.barrier()
        try:
            ckpt.rng_to_files(tmp, self.ctx.rank)
            self._save_model(tmp / ckpt.MODEL_DIR)
            opt_state = self._optimizer_state()
            if self.ctx.is_main:
                ckpt.optimizer_to_files(opt_state, tmp)
                if self.aux is not None:
                    self.aux.save(tmp)
                state = {"step": step, "scheduler": self.scheduler.state_dict(),
                         "world_size": self.ctx.world, "recipe": self.recipe.to_dict()}
                (tmp / ckpt.STATE_FILE).write_text(json.dumps(state, indent=1))
                ckpt.commit_dir(tmp, final)
        except BaseException:           # a full disk: no half-written checkpoint is kept
            if self.ctx.is_main:
                ckpt.discard_dir(tmp)
            raise
        if self.ctx.is_main:
            ckpt.prune(self.out, self.recipe.output.keep_last)
        self.ctx.barrier()
        return final

    def save_final(self, final: Path) -> Path:
        """Write the planner-loadable final model atomically (every process takes part)."""
        tmp = final.parent / f".tmp-{final.name}"
        if self.ctx.is_main:
            ckpt.begin_dir(final)
        self.ctx.barrier()
        try:
            self._save_model(tmp)
            if self.ctx.is_main:
                (tmp / "training_recipe.yaml").write_text(
                    yaml.safe_dump(self.recipe.to_dict(), sort_keys=False))
                ckpt.commit_dir(tmp, final)
        except BaseException:
            if self.ctx.is_main:
                ckpt.discard_dir(tmp)
            raise
        self.ctx.barrier()
        return final

    # ------------------------------------------------------------------- step
    def train_step(self, step: int) -> dict[str, float]:
        """One optimizer step on global batch ``step``; returns its logged values."""
        g = self.recipe.train.global_batch
        pairs = list(zip(self.order.indices(step), self.order.positions(step)))
        micro = shard(pairs, self.ctx.rank, self.ctx.world, self.micro)
        self.optimizer.zero_grad(set_to_none=True)
        names, sums, tokens = None, None, 0
        for k, chunk in enumerate(micro):
            idx, pos = zip(*chunk)
            batch = self.batches.make(list(idx), list(pos))
            with no_sync(self.module, k < len(micro) - 1):
                with self.autocast:
                    out = self.objective(self.module, batch, step)
                # DDP averages gradients over processes: scale so the result is sum / g.
                (out.loss.sum() * (self.ctx.world / g)).backward()
            if names is None:
                names = ["loss", *out.metrics]
                sums = torch.zeros(len(names) + 1, dtype=torch.float64)
            vals = [out.loss.detach().sum()] + [v.sum() for v in out.metrics.values()]
            sums[:-1] += torch.stack([v.double().cpu() for v in vals])
            tokens += out.tokens
        sums[-1] = tokens
        total = self.ctx.sum(sums)
        if self.aux is not None and self.ctx.active:   # the head is outside DDP: average
            for p in self.aux.head.parameters():
                if p.grad is not None:
                    p.grad.copy_(self.ctx.sum(p.grad) / self.ctx.world)
        # grad_clip 0: no clipping, but the norm is still measured (an infinite bound
        # scales every gradient by exactly 1)
        clip = self.recipe.optim.grad_clip or math.inf
        head = list(self.aux.head.parameters()) if self.aux is not None else []
        if hasattr(self.module, "clip_grad_norm_"):   # FSDP: sharded norm
            norm = self.module.clip_grad_norm_(clip)
            if head:
                torch.nn.utils.clip_grad_norm_(head, clip)
        else:
            norm = torch.nn.utils.clip_grad_norm_([*self.module.parameters(), *head], clip)
        loss = float(total[0]) / g
        if not (math.isfinite(loss) and math.isfinite(float(norm))):
            raise TrainingError(f"training diverged at step {step + 1}: the loss is {loss} and "
                                f"the gradient norm {float(norm)}; stopped before the "
                                f"optimizer step, so no checkpoint holds the diverged weights "
                                f"(lower optim.lr or check the data)")
        lrs = {grp["name"]: grp["lr"] for grp in self.optimizer.param_groups}
        self.optimizer.step()
        self.scheduler.step()
        values = {n: float(v) / g for n, v in zip(names, total[:-1])}
        values.update(grad_norm=float(norm), lr=lrs.get("text", 0.0),
                      vision_lr=lrs.get("vision", 0.0), tokens=float(total[-1]))
        return values

    # -------------------------------------------------------------------- run
    def run(self) -> Path:
        r, out = self.recipe, self.out
        final = out / FINAL_DIR
        if self.ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(out / "recipe.yaml",
                         yaml.safe_dump(r.to_dict(), sort_keys=False).encode())
        self.ctx.barrier()
        metrics = MetricsLog(out, r.output.tensorboard, self.start_step) \
            if self.ctx.is_main else None
        name = Path(r.output.dir).name
        self.log(f"[{name}] {r.objective}: {self.model.num_parameters() / 1e6:.2f}M parameters, "
                 f"block {self.block}, {len(self.batches.samples)} samples "
                 f"({self.batches.dropped} too long), {self.ctx.world} process(es) "
                 f"[{self.strategy}], accumulation {self.accum}, steps "
                 f"{self.start_step}..{r.train.steps}")
        mix = self.order.mix()
        if mix:
            dropped = self.batches.dropped_by_task
            self.log(f"[{name}] steps per task: "
                     + ", ".join(f"{k} {v:.0%}" for k, v in mix.items())
                     + (" (too long: " + ", ".join(f"{k} {v}" for k, v in dropped.items())
                        + ")" if dropped else ""))
        if self.aux is not None:
            share = self.aux.coverage(self.batches.samples)
            self.log(f"[{name}] vision aux: weight {r.vision_aux.weight}, {r.vision_aux.subgrid}"
                     f" x {r.vision_aux.subgrid} sub-cells per token, box targets for "
                     f"{share:.0%} of the samples")
        progress = Progress(r.train.steps, self.start_step, name,
                            r.output.progress and self.ctx.is_main)
        t_last, tok_acc = time.perf_counter(), 0.0
        watch = ClipWatch(r, window=min(50, max(1, r.train.steps - self.start_step)))
        try:
            for step in range(self.start_step, r.train.steps):
                values = self.train_step(step)
                note = watch.observe(values["grad_norm"])
                if note:
                    self.warn(note)
                tok_acc += values.pop("tokens")
                done = step + 1
                if done % r.output.log_every == 0 or done == r.train.steps:
                    now = time.perf_counter()
                    values["tokens_per_s"] = tok_acc / max(now - t_last, 1e-9)
                    t_last, tok_acc = now, 0.0
                    if metrics is not None:
                        metrics.log(done, values)
                    progress.update(done, {"loss": values["loss"],
                                           "tok/s": values["tokens_per_s"]})
                if done % r.output.save_every == 0 or done == r.train.steps:
                    self.save_checkpoint(done)
        finally:
            progress.close()
            if metrics is not None:
                metrics.close()
        self.save_final(final)
        self.log(f"[{name}] final model: {final}")
        return final


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def train(recipe: Recipe, resume: bool = False, log=print, warn=None) -> Path:
    """Run a recipe; returns the final checkpoint directory."""
    return Trainer(recipe, resume=resume, log=log, warn=warn).run()
