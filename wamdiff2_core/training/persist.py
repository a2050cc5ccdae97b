"""A run's checkpoints: which one a resume takes, how the run is written and read back.

``RunState`` owns the writing and reading of one run's state for the trainer: the shards
(``sharded.py``) and the JSON beside them (``checkpoint.py``): optimizer groups, scheduler,
the data-loader position, every process's RNG, every tensor's shape and the recipe. A resume
checks, before any tensor is read, that the checkpoint is of this run (recipe, model shape,
records) and falls back past damaged ones; final models are exported from the shards.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from wamdiff2_core.model.config import set_fields
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.config import Recipe, RecipeError
from wamdiff2_core.training.sharded import (group_state, init_optimizer_state, load_shards,
                                            named_parameters, optimizer_keys, restore_groups,
                                            save_shards, state_tensors, tensor_shapes)

# Keys that may change between a run and its resumption (they do not change the results).
RESUMABLE_CHANGES = ("output.", "train.threads", "train.micro_batch", "train.strategy",
                     "train.activation_checkpointing", "distill.teacher_placement")


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
    checkpoint being resumed (output paths, threads, the batch split and how the model is
    laid over processes may differ). A key the saved recipe lacks (added to recipes since it
    was written) and that is at its default now is the same run."""
    a, b = _flatten(saved), _flatten(current)
    defaults = _flatten(Recipe().to_dict())
    for key in sorted(set(a) | set(b)):
        if key.startswith(RESUMABLE_CHANGES):
            continue
        if key not in a and key in defaults and b.get(key) == defaults[key]:
            continue
        if a.get(key) != b.get(key):
            raise RecipeError(f"cannot resume {path}: recipe key '{key}' was {a.get(key)!r} "
                              f"and is now {b.get(key)!r}")


def records_digest(samples) -> str:
    """A digest of the kept records (ids, prompts, answers) in order: a resume must see the
    records the run saw, or its data order is another one."""
    h = hashlib.sha256()
    for s in samples:
        h.update(json.dumps([s.id, s.prompt, s.answer]).encode())
    return h.hexdigest()[:16]


def find_resumable(out: Path, rank: int, recipe: dict, warn, log) -> ckpt.ResumeState | None:
    """The newest checkpoint of ``out`` that reads whole (each damaged newer one is reported
    and skipped); None when there is none at all; RecipeError when every one is damaged or
    the newest readable one is of another recipe."""
    found = ckpt.step_dirs(out)
    damaged = []
    for _, path in reversed(found):
        try:
            state = ckpt.read_resume_state(path, rank)
        except ckpt.CheckpointDamaged as exc:
            damaged.append(f"{path.name}: {exc}")
            warn(f"checkpoint {path} is damaged ({exc}); trying the one before it")
            continue
        if state.unverified:
            warn(f"checkpoint {path} {state.unverified}")
        check_same_run(state.recipe, recipe, path)
        return state
    if found:
        raise RecipeError(f"cannot resume {out}: no checkpoint is complete "
                          f"({'; '.join(damaged)}); move {out / 'checkpoints'} away to start "
                          f"again")
    log(f"no checkpoint in {out}: starting at step 0")
    return None


class RunState:
    """Writes and reads the state of one run (every process calls ``save`` and
    ``restore``)."""

    def __init__(self, trainer):
        self.t = trainer
        head = trainer.aux.head if trainer.aux is not None else None
        self.named = named_parameters(trainer.model.hf, head)

    # ------------------------------------------------------------------ reading
    def restore(self, state: ckpt.ResumeState) -> None:
        """Load ``state`` into the run in place (RecipeError: not this run's checkpoint)."""
        t = self.t
        where = f"checkpoint {state.path}"
        shapes = tensor_shapes(self.named)
        for key in sorted(set(shapes) | set(state.tensors)):
            if shapes.get(key) != state.tensors.get(key):
                raise RecipeError(f"{where} was written for another model shape: {key} is "
                                  f"{state.tensors.get(key)} there and {shapes.get(key)} here")
        digest = records_digest(t.batches.samples)
        if state.data.get("records") != digest:
            raise RecipeError(f"{where} was written for other records than "
                              f"{t.recipe.data.path} holds now, so the run's data order "
                              f"cannot continue (restore the data set or start a new run)")
        keys = set(state.data.get("optimizer_keys", []))
        init_optimizer_state(t.optimizer, [p for k, p in self.named if k in keys])
        reason = restore_groups(t.optimizer, state.groups, self.named)
        if reason:
            raise RecipeError(f"{where} does not fit this run: {reason}")
        try:
            load_shards(state.shards, state_tensors(self.named, t.optimizer))
        except Exception as exc:  # noqa: BLE001 - DCP wraps reader errors in its own kinds
            raise RecipeError(f"cannot read the shards of {where} "
                              f"({str(exc).strip().splitlines()[0][:300]})") from None
        t.scheduler.load_state_dict(state.scheduler)
        ckpt.set_rng(state.rng)
        t.log(f"resumed from {state.path} at step {state.step}"
              + (f" (written by {state.world_size} processes)"
                 if state.world_size != t.ctx.world else ""))

    # ------------------------------------------------------------------ writing
    def _model_files(self, folder: Path) -> None:
        """config.json (with the diffusion fields), tokenizer and processor: no weights."""
        model = self.t.model
        folder.mkdir(parents=True, exist_ok=True)
        set_fields(model.hf.config, model.fields)
        model.hf.config.save_pretrained(str(folder))
        model.processor.save_pretrained(folder)

    def save(self, step: int) -> Path:
        """Write checkpoint ``step`` atomically: each process its shard and RNG files, then
        the first process the JSON and the rename."""
        t = self.t
        root = t.out / "checkpoints"
        final = root / ckpt.step_dir_name(step)
        tmp = root / f".tmp-{final.name}"
        if t.ctx.is_main:
            ckpt.begin_dir(final)
        t.ctx.barrier()
        try:
            ckpt.rng_to_files(tmp, t.ctx.rank)
            save_shards(tmp / ckpt.SHARDS_DIR, state_tensors(self.named, t.optimizer))
            t.ctx.barrier()
            if t.ctx.is_main:
                self._model_files(tmp / ckpt.MODEL_DIR)
                data = {**t.order.position(step), "records": records_digest(t.batches.samples),
                        "optimizer_keys": optimizer_keys(self.named, t.optimizer)}
                ckpt.write_state(tmp, {
                    "step": step, "world_size": t.ctx.world, "strategy": t.strategy,
                    "scheduler": t.scheduler.state_dict(),
                    "optimizer": {"param_groups": group_state(t.optimizer, self.named)},
                    "data": data, "tensors": tensor_shapes(self.named),
                    "recipe": t.recipe.to_dict()})
                ckpt.seal(tmp)
                ckpt.commit_dir(tmp, final)
        except BaseException:           # a full disk: no half-written checkpoint is kept
            if t.ctx.is_main:
                ckpt.discard_dir(tmp)
            raise
        if t.ctx.is_main:
            ckpt.prune(t.out, t.recipe.output.keep_last)
        t.ctx.barrier()
        return final

    def export_final(self, final: Path) -> Path:
        """The planner-loadable model of the newest checkpoint, exported by the first
        process (from the shards on disk: nothing is gathered) with the recipe beside it."""
        from wamdiff2_core.training.export import export_checkpoint

        t = self.t
        t.ctx.barrier()
        if t.ctx.is_main:
            recipe = yaml.safe_dump(t.recipe.to_dict(), sort_keys=False)
            export_checkpoint(ckpt.latest_checkpoint(t.out), final,
                              {"training_recipe.yaml": recipe}, replace=True)
        t.ctx.barrier()
        return final
