"""A training checkpoint's shards -> the planner-loadable Hugging Face directory.

``wamdiff2 export CKPT OUT`` and every run's ``final/``: the student's weights are read from
the shards (whatever number of processes wrote them) into a model built from the
checkpoint's ``model/config.json`` on the meta device and then given CPU memory, written with
``save_pretrained`` (safetensors) beside the checkpoint's tokenizer and processor files.
``OUT`` is written whole or not at all, through a temporary sibling with a fresh name (a
``.tmp-OUT`` the export did not create is never touched). The checkpoint is verified first
(its manifest of content hashes and its metadata, ``checkpoint.read_resume_state``); given a
run's output directory, a damaged newest checkpoint falls back to the newest intact one with
a warning. Only safetensors weights and ``MODEL_FILES`` are written. One process does it; it
needs the model's size in host memory, never a GPU.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.sharded import load_shards


# What a planner-loadable directory takes from the checkpoint's model/ (config, tokenizer,
# processor and chat template): anything else there (a pickle, a stray script) stays behind.
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "vocab.json", "merges.txt", "chat_template.json", "chat_template.jinja",
               "preprocessor_config.json", "video_preprocessor_config.json",
               "processor_config.json", "wamdiff2_processor.json", "candidate_scorer.json")
MAX_MODEL_FILE_BYTES = 64 << 20       # a tokenizer.json is about 11 MB


def _quiet(message: str) -> None:
    """The default of ``warn``: warnings are the caller's to show."""


def resolve_checkpoint(source: str | Path, warn=_quiet) -> ckpt.ResumeState:
    """The checked state of a ``step-*`` checkpoint directory as given, or of the newest
    intact checkpoint of a run's output directory (``warn`` is told about each damaged
    newer one); CheckpointError (one sentence) when there is none."""
    path = Path(source)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory (a training checkpoint step-* or "
                              f"a run's output.dir)")
    if (path / ckpt.STATE_FILE).exists() or ckpt.STEP_DIR.match(path.name):
        try:
            return ckpt.read_resume_state(path)
        except ckpt.CheckpointDamaged as exc:
            raise CheckpointError(f"cannot export {path}: {exc}") from None
    found = ckpt.step_dirs(path)
    damaged = []
    for _, step_dir in reversed(found):
        try:
            return ckpt.read_resume_state(step_dir)
        except ckpt.CheckpointDamaged as exc:
            damaged.append(f"{step_dir.name}: {exc}")
            warn(f"checkpoint {step_dir} is damaged ({exc}); trying the one before it")
    if found:
        raise CheckpointError(f"cannot export {path}: no checkpoint is intact "
                              f"({'; '.join(damaged)})")
    raise CheckpointError(f"{path} holds no training checkpoint (no checkpoints/step-* "
                          f"with a {ckpt.STATE_FILE})")


def _check_target(out: Path, replace: bool) -> None:
    """CheckpointError, before any work, unless ``out`` can be written as a new directory
    (or replaced, with ``replace``) and a temporary sibling can be made beside it."""
    from wamdiff2_core.output_paths import OutputPathError, check_output_path

    if out.exists() and not out.is_dir():
        raise CheckpointError(f"export target {out} is a file")
    if out.is_dir() and any(out.iterdir()) and not replace:
        raise CheckpointError(f"export target {out} already exists and is not empty; "
                              f"choose another directory")
    try:
        check_output_path(out, "export target", folder=True)
        check_output_path(out.parent / f".tmp-{out.name}-probe", "export target", folder=True)
    except OutputPathError as exc:
        raise CheckpointError(str(exc)) from None


def _model_files(config_dir: Path, warn) -> dict[str, bytes]:
    """Name -> content of the files the export copies from ``config_dir`` (read within a
    user file's limits; JSON files parsed once so that deep nesting fails here)."""
    from wamdiff2_core.user_files import parse_json, read_bytes

    files = {}
    for item in sorted(config_dir.iterdir()):
        if item.name not in MODEL_FILES:
            warn(f"{item} is not a file a planner-loadable model needs; it is not exported")
            continue
        try:
            data = read_bytes(item, "model file", MAX_MODEL_FILE_BYTES)
            if item.suffix == ".json":
                parse_json(data, item, "model file", allow_nonfinite=True)
        except ValueError as exc:
            raise CheckpointError(f"cannot export {config_dir.parent}: {exc}") from None
        files[item.name] = data
    return files


def export_checkpoint(source: str | Path, out: str | Path,
                      extra_files: dict[str, str] | None = None,
                      replace: bool = False, warn=_quiet) -> Path:
    """Write the planner-loadable directory of checkpoint ``source`` to ``out`` (and
    ``extra_files``: name -> text); returns ``out``. A damaged checkpoint (its manifest, its
    metadata), an ``out`` that exists and is not empty (unless ``replace``) or cannot be
    written is a CheckpointError before any work, and leaves ``out`` as it was. Only the
    weights (safetensors) and ``MODEL_FILES`` are written; the temporary folder has a fresh
    name, so nothing the export did not create is removed."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from wamdiff2_core.model.checkpoint import read_config

    out = Path(out)
    _check_target(out, replace)
    state = resolve_checkpoint(source, warn)
    path = state.path
    if state.unverified:
        warn(f"checkpoint {path} {state.unverified}")
    config_dir = path / ckpt.MODEL_DIR
    files = _model_files(config_dir, warn)
    read_config(config_dir)                     # a Qwen3-VL config that states every shape
    try:
        cfg = Qwen3VLConfig.from_pretrained(str(config_dir), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"cannot export {path}: its {ckpt.MODEL_DIR}/config.json is not "
                              f"a usable Qwen3-VL config ({str(exc)[:200]})") from None
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
        for name, data in files.items():      # config (with the diffusion fields),
            (tmp / name).write_bytes(data)     # tokenizer and processor files
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)

    return _write_fresh(out, write)


def _write_fresh(out: Path, write) -> Path:
    """``write(tmp)`` into a temporary sibling of ``out`` with a fresh name, renamed to
    ``out``; on failure only that temporary is removed and the failure is one sentence."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out.name}-", dir=out.parent))
    except OSError as exc:
        raise CheckpointError(f"cannot write export target {out}: "
                              f"{exc.strerror or exc}") from None
    try:
        write(tmp)
        return ckpt.commit_dir(tmp, out)
    except OSError as exc:
        ckpt.discard_dir(tmp)
        raise CheckpointError(f"cannot write export target {out}: "
                              f"{exc.strerror or exc}") from None
    except BaseException:
        ckpt.discard_dir(tmp)
        raise
