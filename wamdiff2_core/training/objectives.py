"""What each stage minimises, registered by name (the recipe's ``objective``).

Every objective maps one micro-batch to a per-sample loss (B,) plus per-sample metrics; the
engine sums them over the global batch and divides by its size, so the loss of a step does not
depend on how the batch is split over processes and accumulation steps.

- ``ar`` (stage 0): next-token cross-entropy on the answer tokens (answer + end-of-answer),
  ``[prefix | answer]`` causal layout; the answer span is where we put it, never guessed.
- ``diffusion`` (stage I): ``[prefix | x0 | xt]``, one stratified mask ratio per answer block,
  CE on masked positions weighted by 1/t, normalised by the answer length.
- ``distill`` (stages II and III): the student's diffusion view and a frozen teacher's view of
  the same corrupted sequence; (1 - lambda) CE + lambda D (JSD / KL at temperature tau).
  The teacher's view depends on its paradigm: a diffusion teacher sees ``[prefix | x0 | xt]``
  with its own block size; an AR teacher predicts each answer token from the clean prefix.
  In on-policy mode, every K steps the student's own decoded answers replace x0; the CE term
  is dropped on those steps (its target would be the student's own output).

Every objective divides a sample's summed token loss by ``batch.loss_norm``: its own answer
length, or with ``train.loss_norm: task`` its task's mean answer length (see ``BatchMaker``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding.reference import decode
from wamdiff2_core.diffusion.layout import (LayoutInputs, ar_inputs, diffusion_inputs,
                                            diffusion_logits, kept_positions)
from wamdiff2_core.diffusion.losses import distill_loss, masked_ce
from wamdiff2_core.diffusion.noise import corrupt, get_schedule, sample_generators
from wamdiff2_core.training.config import Recipe
from wamdiff2_core.training.data import TrainBatch
from wamdiff2_core.training.parallel import gathered


def run_forward(module, inputs: LayoutInputs, keep: int) -> torch.Tensor:
    """Logits (B, keep, V) of the last ``keep`` positions; ``module`` is the Hugging Face
    model or its DDP / FSDP wrapper (so gradients are synchronised by the engine)."""
    out = module(input_ids=inputs.input_ids, attention_mask=inputs.mask,
                 position_ids=inputs.positions, use_cache=False, logits_to_keep=keep,
                 **inputs.vision)
    return out.logits


@dataclass
class StepOutput:
    loss: torch.Tensor                 # (B,) per-sample loss (differentiable)
    metrics: dict[str, torch.Tensor]   # name -> (B,) per-sample values (detached)
    tokens: int                        # tokens through the student forward


class ArObjective:
    """Stage 0: next-token loss on the answer tokens."""

    def __init__(self, recipe: Recipe, model, teacher=None):
        self.model = model

    def __call__(self, module, batch: TrainBatch, step: int) -> StepOutput:
        a = batch.answers.shape[1]
        inputs = ar_inputs(self.model, batch.prompt, batch.answers)
        logits = run_forward(module, inputs, a + 1)[:, :-1]             # (B, A, V)
        valid = torch.arange(a).unsqueeze(0) < batch.lengths.unsqueeze(1)
        dev = logits.device
        loss = masked_ce(logits, batch.answers.to(dev), valid.to(dev),
                         torch.ones(valid.shape, device=dev), batch.loss_norm.to(dev))
        return StepOutput(loss, {"ce": loss.detach()}, inputs.input_ids.numel())


class DiffusionObjective:
    """Stage I: the block-diffusion ELBO."""

    def __init__(self, recipe: Recipe, model, teacher=None):
        self.model, self.recipe = model, recipe
        self.block = recipe.model.block_size
        self.schedule = get_schedule(recipe.noise.schedule)

    def corrupt(self, batch: TrainBatch, step: int, answers: torch.Tensor | None = None,
                lengths: torch.Tensor | None = None):
        answers = batch.answers if answers is None else answers
        lengths = batch.lengths if lengths is None else lengths
        gens = sample_generators(self.recipe.train.seed, step, batch.positions)
        return corrupt(answers, lengths, self.block, self.model.fields.mask_token_id, gens,
                       self.recipe.noise.eps, self.schedule)

    def student_logits(self, module, inputs: LayoutInputs, a: int) -> torch.Tensor:
        """The student's predictions (B, A, V) of the xt tokens (shifted or not, as its
        fields say)."""
        shift = self.model.fields.shift
        logits = run_forward(module, inputs, kept_positions(a, shift))
        return diffusion_logits(logits, a, self.block, shift)

    def __call__(self, module, batch: TrainBatch, step: int) -> StepOutput:
        c = self.corrupt(batch, step)
        a = batch.answers.shape[1]
        inputs = diffusion_inputs(self.model, batch.prompt, batch.answers, c.xt, self.block)
        logits = self.student_logits(module, inputs, a)                  # (B, A, V)
        dev = logits.device
        loss = masked_ce(logits, batch.answers.to(dev), c.masked.to(dev), c.weight.to(dev),
                         batch.loss_norm.to(dev))
        frac = c.masked.sum(-1) / batch.lengths
        return StepOutput(loss, {"ce": loss.detach(), "masked": frac.to(dev)},
                          inputs.input_ids.numel())


# ------------------------------------------------------------------ distillation
def _teacher_diffusion(teacher, batch: TrainBatch, x0, xt, block: int) -> torch.Tensor:
    inputs = diffusion_inputs(teacher, batch.prompt, x0, xt, block)
    a, shift = x0.shape[1], teacher.fields.shift
    return diffusion_logits(run_forward(teacher.hf, inputs, kept_positions(a, shift)), a,
                            block, shift)


def _teacher_ar(teacher, batch: TrainBatch, x0, xt, block: int) -> torch.Tensor:
    inputs = ar_inputs(teacher, batch.prompt, x0)
    return run_forward(teacher.hf, inputs, x0.shape[1] + 1)[:, :-1]


TEACHER_VIEWS: dict[str, Callable] = {"diffusion": _teacher_diffusion, "ar": _teacher_ar}


class DistillObjective(DiffusionObjective):
    """Stages II / III: a frozen teacher and the student on the same corrupted sequence."""

    def __init__(self, recipe: Recipe, model, teacher):
        super().__init__(recipe, model)
        if teacher is None:
            raise ValueError("the distill objective needs a teacher model")
        self.teacher, self.d = teacher, recipe.distill
        self.teacher_block = self.d.teacher_block(teacher.fields.paradigm,
                                                  teacher.fields.block_size)
        self.view = TEACHER_VIEWS[teacher.fields.paradigm]
        self.max_answer = recipe.data.max_answer_tokens

    def on_policy_answers(self, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The student's own decoded answers, laid out like ground-truth answers."""
        was_training = self.model.hf.training
        self.model.hf.eval()
        cfg = DecodeConfig(steps_per_block=self.d.on_policy_steps_per_block or None,
                           max_new_tokens=self.max_answer - self.block)
        with gathered(self.model.hf):      # FSDP2: each process decodes at its own pace
            out = decode(self.model, batch.prompt, cfg)
        self.model.hf.train(was_training)
        eoa = self.model.fields.eoa_token_id
        rows = []
        for seq in out.sequences:
            ids = seq[:self.max_answer - 1] + [eoa]
            n = -(-len(ids) // self.block) * self.block
            rows.append(ids + [eoa] * (n - len(ids)))
        width = max(len(r) for r in rows)
        answers = torch.full((len(rows), width), eoa, dtype=torch.long)
        for i, r in enumerate(rows):
            answers[i, :len(r)] = torch.tensor(r)
        return answers, torch.tensor([len(r) for r in rows])

    def __call__(self, module, batch: TrainBatch, step: int) -> StepOutput:
        on_policy = self.d.on_policy_every > 0 and step % self.d.on_policy_every == 0
        x0, lengths = (self.on_policy_answers(batch) if on_policy
                       else (batch.answers, batch.lengths))
        c = self.corrupt(batch, step, x0, lengths)
        a = x0.shape[1]
        inputs = diffusion_inputs(self.model, batch.prompt, x0, c.xt, self.block)
        logits = self.student_logits(module, inputs, a)                  # (B, A, V)
        with torch.no_grad():
            t_logits = self.view(self.teacher, batch, x0, c.xt, self.teacher_block)
        if t_logits.shape[-1] != logits.shape[-1]:
            raise ValueError(f"teacher vocabulary {t_logits.shape[-1]} differs from the "
                             f"student's {logits.shape[-1]}")
        dev = logits.device
        lam = 1.0 if on_policy else self.d.lam
        norm = lengths if on_policy else batch.loss_norm    # own answers: their lengths
        loss, ce, kd = distill_loss(logits, t_logits, x0.to(dev), c.masked.to(dev),
                                    c.weight.to(dev), norm.to(dev), lam,
                                    self.d.divergence, self.d.temperature, self.d.beta)
        return StepOutput(loss, {"ce": ce.detach(), "kd": kd.detach()},
                          inputs.input_ids.numel())


OBJECTIVES = {"ar": ArObjective, "diffusion": DiffusionObjective, "distill": DistillObjective}


def build_objective(recipe: Recipe, model, teacher=None):
    """The objective the recipe names, bound to the student (and teacher)."""
    return OBJECTIVES[recipe.objective](recipe, model, teacher)
