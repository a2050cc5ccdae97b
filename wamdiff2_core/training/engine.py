"""The trainer: one loop for every stage (the objective is the only thing that changes).

One optimizer step = one global batch of ``train.global_batch`` samples, split over processes
(each takes its slice) and accumulation micro-steps. The loss is the sum of per-sample losses
divided by the global batch size, so 1 process and N processes with the same global batch
compute the same loss and gradients (up to float summation order), under DDP or FSDP2
(``train.strategy``; ``parallel.py``). AdamW with its own learning rate for the vision tower,
linear warm-up then cosine decay, gradient clipping, bf16 (autocast; FSDP2's bf16 policy on
GPUs), activation checkpointing as a recipe switch. Sharded checkpoints every
``output.save_every`` steps (atomic; ``persist.py``); ``resume=True`` continues the newest
complete checkpoint of ``output.dir`` bit-for-bit in data order and noise, at any number of
processes. A damaged newest checkpoint is reported and the previous one is used; a step whose
loss or gradient norm is not finite stops the run before the optimizer touches the weights.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path

import torch
import yaml
from transformers.utils import logging as hf_logging

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.build import (build_student, load_teacher, lr_lambda, make_aux,
                                          param_groups)
from wamdiff2_core.training.config import Recipe, RecipeError
from wamdiff2_core.training.data import (BatchMaker, GlobalOrder, group_keys, key_task,
                                         load_samples, shard)
from wamdiff2_core.training.data_check import check_images
from wamdiff2_core.training.distributed import DistContext, check_strategy, no_sync, wrap
from wamdiff2_core.training.memory import auto_strategy, shape_of, teacher_placement
from wamdiff2_core.training.metrics import ClipWatch, MetricsLog, Progress
from wamdiff2_core.training.objectives import build_objective
from wamdiff2_core.training.parallel import (apply_fsdp, clip_gradients,
                                             enable_activation_checkpointing, is_sharded)
from wamdiff2_core.training.persist import RunState, check_same_run, find_resumable
from wamdiff2_core.training.probe import memory_report
from wamdiff2_core.training.throughput import Throughput, matmul_params, peak_flops
from wamdiff2_core.training.validate import effective_block_size, validate
from wamdiff2_core.training.vision_aux import VisionAuxObjective

__all__ = ["FINAL_DIR", "ClipWatch", "Trainer", "TrainingError", "check_same_run", "train"]
FINAL_DIR = "final"
BAR = {"loss": "loss", "tokens_per_s": "tok/s", "samples_per_s": "samples/s", "mfu": "MFU"}
hf_logging.disable_progress_bar()


class TrainingError(RuntimeError):
    """A run that cannot go on (a loss that is not finite); one sentence, nothing saved."""


def device_bytes(ctx: DistContext) -> int:
    """Memory one process may use: its GPU's, or the host's shared by the node's processes."""
    if ctx.device.type == "cuda":
        return torch.cuda.get_device_properties(ctx.device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, ctx.local_world)


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
                               recipe.data.limit, recipe.data.cameras, recipe.data.image_root)
        check_images(samples, f"data set {recipe.data.path}",
                     recipe.output.progress and self.ctx.is_main)
        state = (find_resumable(self.out, self.ctx.rank, recipe.to_dict(), self.warn, self.log)
                 if resume else None)
        self.start_step = state.step if state is not None else 0
        self.resume_from = state.path if state is not None else None
        device = self.ctx.device
        self.model = build_student(recipe, device)
        self.aux = make_aux(recipe, self.model)
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
        self.teacher = load_teacher(recipe, device)
        self.strategy, self.plan_inputs = self._strategy()
        self.placement = teacher_placement(recipe, self.strategy) if self.teacher else ""
        self.objective = build_objective(recipe, self.model, self.teacher)
        if self.aux is not None:
            self.aux.set_samples(samples)       # every record's boxes, long answers too
            self.objective = VisionAuxObjective(self.objective, self.aux)
        self.model.hf.train()
        if t.activation_checkpointing:
            enable_activation_checkpointing(self.model.hf)
        self.module = wrap(self.model.hf, self.strategy, self.ctx, t.precision)
        if self.placement == "sharded":
            self.ctx.ensure_group()
            apply_fsdp(self.teacher.hf, device, self.ctx.world, t.precision)
        self.optimizer = torch.optim.AdamW(param_groups(self.model, recipe, self.aux),
                                           betas=tuple(recipe.optim.betas))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(recipe))
        self.state = RunState(self)
        if state is not None:
            self.state.restore(state)
        self.micro = t.micro_batch
        self.accum = t.global_batch // (t.micro_batch * self.ctx.world)
        self.autocast = (torch.autocast(device.type, dtype=torch.bfloat16)
                         if t.precision == "bf16" else contextlib.nullcontext())
        n_teacher = matmul_params(self.teacher.hf) if self.teacher is not None else 0
        peak = peak_flops(device, t.precision)
        self.throughput = Throughput(6 * matmul_params(self.model.hf) + 2 * n_teacher,
                                     peak * self.ctx.world if peak else None)

    def _strategy(self) -> tuple[str, tuple]:
        """The strategy to run (``auto`` resolved by the memory plan) and what the plan of
        this run needs (student and teacher shapes)."""
        t, ctx = self.recipe.train, self.ctx
        student = shape_of(self.model.hf, self.recipe.model.init,
                           self.model.processor.config.max_pixels)
        teacher = (shape_of(self.teacher.hf, self.recipe.distill.teacher)
                   if self.teacher is not None else None)
        strategy = t.strategy
        if strategy == "auto":
            strategy, _ = auto_strategy(self.recipe, student, teacher, ctx.world,
                                        ctx.device.type == "cuda", device_bytes(ctx))
        elif strategy == "ddp" and not ctx.active:
            strategy = "none"                 # DDP over one process is that process
        check_strategy(strategy, ctx)
        return strategy, (student, teacher)

    # ------------------------------------------------------------------- step
    def _check_images(self, batch) -> None:
        """Under FSDP2 every process must run the same units: a micro-step in which some
        processes have images and others do not would wait forever in the vision tower."""
        if not (is_sharded(self.module) and self.ctx.active):
            return
        every, some = self.ctx.agree("pixel_values" in batch.prompt)
        if some and not every:
            raise TrainingError("under train.strategy=fsdp every process's micro-batch must "
                                "hold images or none must (the vision blocks are sharded): "
                                "keep image and text-only records in separate tasks with "
                                "data.group_by_task, or use train.strategy=ddp")

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
            self._check_images(batch)
            with no_sync(self.module, k < len(micro) - 1):
                with self.autocast:
                    out = self.objective(self.module, batch, step)
                # DDP and FSDP2 average gradients over processes: scale so the result is
                # sum / g.
                (out.loss.sum() * (self.ctx.world / g)).backward()
            if names is None:
                names = ["loss", *out.metrics]
                sums = torch.zeros(len(names) + 1, dtype=torch.float64)
            vals = [out.loss.detach().sum()] + [v.sum() for v in out.metrics.values()]
            sums[:-1] += torch.stack([v.double().cpu() for v in vals])
            tokens += out.tokens
        sums[-1] = tokens
        total = self.ctx.sum(sums)
        head = list(self.aux.head.parameters()) if self.aux is not None else []
        if head and self.ctx.active:          # the head is outside DDP / FSDP: average
            for p in head:
                if p.grad is not None:
                    p.grad.copy_(self.ctx.sum(p.grad) / self.ctx.world)
        # grad_clip 0: no clipping, but the norm is still measured
        clip = self.recipe.optim.grad_clip or math.inf
        params = list(self.module.parameters())
        groups = [params, head] if is_sharded(self.module) else [params + head]
        norm = clip_gradients(groups, clip)
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
    def save_checkpoint(self, step: int) -> Path:
        """Write checkpoint ``step`` atomically (every process takes part)."""
        return self.state.save(step)

    def _describe(self, name: str) -> None:
        r = self.recipe
        extra = ((", activation checkpointing" if r.train.activation_checkpointing else "")
                 + (f", teacher {self.placement}" if self.teacher is not None else ""))
        self.log(f"[{name}] {r.objective}: {self.model.num_parameters() / 1e6:.2f}M parameters, "
                 f"block {self.block}, {len(self.batches.samples)} samples "
                 f"({self.batches.dropped} too long), {self.ctx.world} process(es) "
                 f"[{self.strategy}{extra}], accumulation {self.accum}, steps "
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
        self._describe(name)
        progress = Progress(r.train.steps, self.start_step, name,
                            r.output.progress and self.ctx.is_main)
        t_last = time.perf_counter()
        watch = ClipWatch(r, window=min(50, max(1, r.train.steps - self.start_step)))
        try:
            for step in range(self.start_step, r.train.steps):
                values = self.train_step(step)
                if step == self.start_step:
                    memory_report(self, name)
                note = watch.observe(values["grad_norm"])
                if note:
                    self.warn(note)
                self.throughput.add(values.pop("tokens"), r.train.global_batch)
                done = step + 1
                if done % r.output.log_every == 0 or done == r.train.steps:
                    now = time.perf_counter()
                    values.update(self.throughput.rates(now - t_last))
                    t_last = now
                    if metrics is not None:
                        metrics.log(done, values)
                    progress.update(done, {label: values[k] for k, label in BAR.items()
                                           if k in values})
                if done % r.output.save_every == 0 or done == r.train.steps:
                    self.save_checkpoint(done)
        finally:
            progress.close()
            if metrics is not None:
                metrics.close()
        self.state.export_final(final)
        self.log(f"[{name}] final model: {final}")
        return final


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def train(recipe: Recipe, resume: bool = False, log=print, warn=None) -> Path:
    """Run a recipe; returns the final checkpoint directory."""
    return Trainer(recipe, resume=resume, log=log, warn=warn).run()
