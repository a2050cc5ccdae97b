"""A training checkpoint's shards -> the planner-loadable Hugging Face directory.

``wamdiff2 export CKPT OUT`` and every run's ``final/``: the student's weights are read from
the shards (whatever number of processes wrote them) into a model built from the
checkpoint's ``model/config.json`` on the meta device and then given CPU memory, written with
``save_pretrained`` (safetensors) beside the checkpoint's tokenizer and processor files.
``OUT`` is written whole or not at all. One process does it; it needs the model's size in
host memory, never a GPU.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.sharded import load_shards


def resolve_checkpoint(source: str | Path) -> Path:
    """A ``step-*`` checkpoint directory as given, or the newest complete one of a run's
    output directory; CheckpointError (one sentence) otherwise."""
    path = Path(source)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory (a training checkpoint step-* or "
                              f"a run's output.dir)")
    if (path / ckpt.STATE_FILE).is_file() or ckpt.STEP_DIR.match(path.name):
        return path
    latest = ckpt.latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"{path} holds no training checkpoint (no checkpoints/step-* "
                              f"with a {ckpt.STATE_FILE})")
    return latest


def export_checkpoint(source: str | Path, out: str | Path,
                      extra_files: dict[str, str] | None = None,
                      replace: bool = False) -> Path:
    """Write the planner-loadable directory of checkpoint ``source`` to ``out`` (and
    ``extra_files``: name -> text); returns ``out``. A damaged checkpoint, or an ``out``
    that exists and is not empty (unless ``replace``), is a CheckpointError and leaves
    ``out`` as it was."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    path = resolve_checkpoint(source)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"export target {out} is a file")
    if out.is_dir() and any(out.iterdir()) and not replace:
        raise CheckpointError(f"export target {out} already exists and is not empty; "
                              f"choose another directory")
    try:
        ckpt.read_resume_state(path)
    except ckpt.CheckpointDamaged as exc:
        raise CheckpointError(f"cannot export {path}: {exc}") from None
    config_dir = path / ckpt.MODEL_DIR
    cfg = Qwen3VLConfig.from_pretrained(str(config_dir))
    with torch.device("meta"):
        hf = Qwen3VLForConditionalGeneration(cfg)
    hf = hf.to_empty(device="cpu")
    hf.tie_weights()             # to_empty gave tied parameters storages of their own
    tensors = {f"model/{n}": p.detach() for n, p in hf.named_parameters()}
    try:
        load_shards(path / ckpt.SHARDS_DIR, tensors, process_local=True)
    except Exception as exc:  # noqa: BLE001 - DCP wraps reader errors in its own kinds
        raise CheckpointError(f"cannot export {path}: its shards do not read "
                              f"({str(exc).strip().splitlines()[0][:300]})") from None

    def write(tmp: Path) -> None:
        hf.save_pretrained(str(tmp), safe_serialization=True)
        for item in config_dir.iterdir():          # config (with the diffusion fields),
            if item.is_file():                      # tokenizer and processor files
                shutil.copy2(item, tmp / item.name)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)

    return ckpt.atomic_dir(out, write)
