"""What a training checkpoint must hold to be trusted: content hashes and a metadata schema.

A checkpoint directory carries ``manifest.json``: the sha256 and size of every other file in
it (shards, RNG states, ``trainer_state.json``, the model's config, tokenizer and processor
files), written last, inside the temporary directory that is renamed into place. A shard
swapped for a same-size shard of another step or run, an edited trainer state, a file added
or removed: each no longer matches. ``manifest_problem`` says which file and how.

``state_problem`` checks ``trainer_state.json`` value by value (types and ranges), so an
edited or corrupt value (``world_size: "abc"``, ``lr: "abc"``, a junk scheduler, a shard
entry naming ``../``) is a reason to fall back to an older checkpoint, never a traceback in
the middle of a resume. ``rng_problem`` loads RNG states into scratch generators first.

Every function returns the reason (a clause: "shard shards/x has another content than was
written") or None; the caller raises ``checkpoint.CheckpointDamaged`` with it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.user_files import UserFileError, check_regular, read_json

MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "wamdiff2-checkpoint-manifest/1"
MAX_METADATA_BYTES = 256 << 20        # trainer_state.json lists every tensor: MBs for 8B
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.safetensors")


# ---------------------------------------------------------------------- manifest
def sha256_file(path: Path) -> str:
    """The sha256 of the regular file ``path`` (opened without blocking on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _files(folder: Path) -> list[str]:
    """Every file under ``folder`` but the manifest, as sorted POSIX relative paths
    (symlinks and other non-directories included, so that none goes unlisted)."""
    out = []
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            full = Path(root) / name
            if name in names or full.is_symlink():
                out.append(full.relative_to(folder).as_posix())
    return sorted(p for p in out if p != MANIFEST_FILE)


def write_manifest(folder: Path) -> None:
    """Write ``folder/manifest.json`` (atomically): sha256 and size of every other file."""
    files = {}
    for rel in _files(folder):
        path = folder / rel
        files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    doc = {"format": MANIFEST_FORMAT, "files": files}
    write_atomic(folder / MANIFEST_FILE, (json.dumps(doc, indent=1) + "\n").encode())


def _inside(folder: Path, rel: str) -> bool:
    """Whether ``rel`` names a path inside ``folder`` (no absolute path, no ``..``, and no
    symlink leading out of it)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or \
            "\\" in rel or "\0" in rel:
        return False
    try:
        (folder / rel).resolve().relative_to(folder.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def manifest_problem(folder: Path) -> tuple[str | None, bool]:
    """(why ``folder`` does not match its manifest or None, whether it has a manifest).

    A checkpoint without one (written before they carried content hashes) is accepted
    with a warning by the caller: its files are then checked by size and header only."""
    path = folder / MANIFEST_FILE
    if not os.path.lexists(path):
        return None, False
    try:
        doc = read_json(path, MANIFEST_FILE, MAX_METADATA_BYTES, max_depth=4)
    except UserFileError as exc:
        return f"its {MANIFEST_FILE} cannot be read ({exc.problem})", True
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or \
            not isinstance(doc.get("files"), dict) or not doc["files"]:
        return f"its {MANIFEST_FILE} is not a checkpoint manifest ({MANIFEST_FORMAT})", True
    listed = doc["files"]
    for rel, entry in listed.items():
        if not _inside(folder, rel):
            return f"its {MANIFEST_FILE} names {rel[:100]!r}, outside the checkpoint", True
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or \
                not _SHA256.fullmatch(entry["sha256"]) or not _count(entry.get("bytes")):
            return f"its {MANIFEST_FILE} entry of {rel} is malformed", True
    unlisted = sorted(set(_files(folder)) - set(listed))
    if unlisted:
        return f"it holds {unlisted[0]}, which its {MANIFEST_FILE} does not list", True
    for rel, entry in listed.items():
        reason = _file_problem(folder, rel, entry)
        if reason:
            return reason, True
    return None, True


def _file_problem(folder: Path, rel: str, entry: dict) -> str | None:
    path = folder / rel
    try:
        check_regular(path, rel)
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{rel} has {size} bytes, {entry['bytes']} were written"
        if sha256_file(path) != entry["sha256"]:
            return (f"{rel} has another content than was written (its sha256 does not "
                    f"match {MANIFEST_FILE}: a file of another step or run, or damaged)")
    except UserFileError as exc:
        return f"{rel} {exc.problem}"
    except OSError as exc:
        return f"{rel} cannot be read ({exc.strerror or exc})"
    return None


# ------------------------------------------------------------------------ values
def _count(value, high: int = 1 << 62) -> bool:
    """Whether ``value`` is an int (not a bool) in [0, high]."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def _finite(value, low: float = 0.0, high: float = 1e6) -> bool:
    """Whether ``value`` is a real number (not a bool) in [low, high]."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and low <= value <= high


def _str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


_GROUP_NUMBERS = {"lr": (0.0, 1e3), "initial_lr": (0.0, 1e3), "weight_decay": (0.0, 1e3),
                  "eps": (1e-30, 1.0)}
_GROUP_FLAGS = ("amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused",
                "decoupled_weight_decay")


def _group_problem(i: int, group) -> str | None:
    where = f"optimizer group {i + 1}"
    if not isinstance(group, dict) or not _str_list(group.get("params")):
        return f"{where} is not a mapping with a list of parameter names"
    for key, (low, high) in _GROUP_NUMBERS.items():
        if key in group and not _finite(group[key], low, high):
            return f"{where}: {key} must be a number in [{low:g}, {high:g}], got " \
                   f"{repr(group[key])[:40]}"
    betas = group.get("betas", [0.9, 0.999])
    if not (isinstance(betas, list) and len(betas) == 2 and
            all(_finite(b, 0.0, 0.999999) for b in betas)):
        return f"{where}: betas must be two numbers in [0, 1), got {repr(betas)[:40]}"
    for key in _GROUP_FLAGS:
        if group.get(key) not in (None, True, False):
            return f"{where}: {key} must be true, false or null"
    if not isinstance(group.get("name", ""), str):
        return f"{where}: name must be a string"
    known = {"params", "betas", "name", *_GROUP_NUMBERS, *_GROUP_FLAGS}
    for key, value in group.items():             # another torch version's settings
        if key not in known and not (value is None or isinstance(value, (bool, int, str)) or
                                     _finite(value, -1e6, 1e6)):
            return f"{where}: {str(key)[:40]} must be a plain value"
    return None


def _scheduler_problem(scheduler: dict) -> str | None:
    """A LambdaLR state: ``load_state_dict`` copies every key onto the scheduler object,
    so only its own keys, with their types, are accepted."""
    allowed = {"base_lrs", "_last_lr", "last_epoch", "_step_count", "lr_lambdas",
               "_is_initial", "_get_lr_called_within_step", "verbose"}
    extra = sorted(map(str, set(scheduler) - allowed))
    if extra:
        return f"its scheduler state has an unknown key {extra[0][:40]!r}"
    for key in ("base_lrs", "_last_lr"):
        value = scheduler.get(key, [])
        if not (isinstance(value, list) and len(value) <= 1024 and
                all(_finite(v, 0.0, 1e3) for v in value)):
            return f"its scheduler state's {key} must be a list of learning rates"
    for key in ("last_epoch", "_step_count"):
        value = scheduler.get(key, 0)
        if not (isinstance(value, int) and not isinstance(value, bool) and
                -1 <= value <= 1 << 40):
            return f"its scheduler state's {key} must be a step count, got {repr(value)[:40]}"
    lambdas = scheduler.get("lr_lambdas", [])
    if not (isinstance(lambdas, list) and all(v is None for v in lambdas)):
        return "its scheduler state's lr_lambdas must be a list of nulls"
    for key in ("_is_initial", "_get_lr_called_within_step", "verbose"):
        if scheduler.get(key) not in (None, True, False):
            return f"its scheduler state's {key} must be true or false"
    return None


def _tensors_problem(tensors: dict) -> str | None:
    for key, shape in tensors.items():
        if not (isinstance(shape, list) and len(shape) <= 8 and
                all(_count(d, 1 << 40) for d in shape)):
            return f"its tensor {str(key)[:80]} has a malformed shape {repr(shape)[:40]}"
    return None


def _shards_problem(shards: dict) -> str | None:
    for name, size in shards.items():
        if not _SHARD_NAME.fullmatch(str(name)) or ".." in str(name):
            return f"its shard entry {str(name)[:80]!r} is not a shard file name inside " \
                   f"the checkpoint"
        if not _count(size):
            return f"its shard entry {name} has a malformed size {repr(size)[:40]}"
    return None


def state_problem(state: dict) -> str | None:
    """Why the values of ``trainer_state.json`` (keys and types already present) cannot be
    those a run wrote, or None."""
    if not _count(state["step"], 1 << 40):
        return f"its step must be a count, got {repr(state['step'])[:40]}"
    if not _count(state.get("world_size", 1), 1 << 16) or state.get("world_size", 1) < 1:
        return f"its world_size must be a process count in [1, 65536], got " \
               f"{repr(state.get('world_size'))[:40]}"
    groups = state["optimizer"]["param_groups"]
    for i, group in enumerate(groups):
        reason = _group_problem(i, group)
        if reason:
            return f"{reason}"
    data = state["data"]
    if not isinstance(data.get("records", ""), str) or \
            not _str_list(data.get("optimizer_keys", [])):
        return "its data position is malformed (records, optimizer_keys)"
    return (_scheduler_problem(state["scheduler"]) or _tensors_problem(state["tensors"])
            or _shards_problem(state["shards"]))


def rng_problem(meta, tensors: dict) -> str | None:
    """Why the RNG states (``rng-rank<r>.json`` as read, the safetensors' tensors) do not
    load: each is set on a scratch generator first, so a cut or overflowing array is a
    reason here and never reaches the run's own generators."""
    import random

    import numpy as np
    import torch

    try:
        n, p = meta["numpy"], meta["python"]
        np.random.RandomState().set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
        random.Random().setstate((p[0], tuple(p[1]), p[2]))
        torch.Generator().set_state(tensors["torch"])
        cuda = tensors.get("cuda")
        if cuda is not None and (cuda.dtype != torch.uint8 or cuda.ndim != 1):
            return "its CUDA RNG state is not a byte vector"
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, RuntimeError) as exc:
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else \
            type(exc).__name__
        return f"its RNG state does not load ({text})"
    return None
