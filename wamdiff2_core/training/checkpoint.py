"""Training checkpoints: sharded, written atomically and without pickle.

``OUT/checkpoints/step-00000120/`` holds:

- ``shards/``: the student's parameters, the vision aux head and their AdamW state, each
  process's slices in its own safetensors file (``sharded.py``; no gather, readable by any
  number of processes);
- ``model/``: the model's config.json, tokenizer and processor files (no weights):
  ``wamdiff2 export`` turns the directory into a planner-loadable checkpoint;
- ``rng-rank<r>.safetensors`` + ``rng-rank<r>.json``: every process's RNG states (torch,
  CUDA, numpy, python);
- ``trainer_state.json``: step, scheduler, optimizer groups, data-loader position, the
  recipe, every tensor's shape and every shard's size;
- ``manifest.json``: the sha256 and size of every other file (``checkpoint_check.py``);
  written last.

Everything is first written to ``.tmp-step-00000120`` and renamed into place, so a directory
named ``step-*`` is always complete; a half-written ``.tmp-*`` left by a killed run is never
picked up (and is removed by the next save), one left by a failed write (a full disk) is
removed at once.

A ``step-*`` directory can still be damaged afterwards (a disk error, a truncated copy, a
hand edit, a shard swapped for one of another step): ``read_resume_state`` checks every
file against the manifest and every value of the trainer state against its schema, and
raises ``CheckpointDamaged`` naming the file, so the trainer can fall back to an older
checkpoint. A checkpoint without a manifest (written before they existed) is accepted with a
warning (``ResumeState.unverified``): its files are checked by size and header only.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from wamdiff2_core.training.checkpoint_check import (MANIFEST_FILE, MAX_METADATA_BYTES,
                                                     manifest_problem, rng_problem,
                                                     state_problem, write_manifest)
from wamdiff2_core.training.sharded import SHARDS_DIR, check_shards, shard_manifest
from wamdiff2_core.user_files import UserFileError, check_regular, read_json

STEP_DIR = re.compile(r"^step-(\d{8})$")
STATE_FILE = "trainer_state.json"
MODEL_DIR = "model"


class CheckpointDamaged(Exception):
    """A checkpoint directory a run cannot resume from; the message names the file."""


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def begin_dir(final: Path) -> Path:
    """A fresh, empty temporary sibling of ``final`` to write into."""
    final = Path(final)
    tmp = final.parent / f".tmp-{final.name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_dir(tmp: Path, final: Path) -> Path:
    """Rename the finished temporary ``tmp`` to ``final`` (replacing an older one)."""
    final = Path(final)
    _fsync_dir(tmp)
    if final.exists():
        # a fresh name: a folder the caller did not create is never removed
        old = Path(tempfile.mkdtemp(prefix=f".old-{final.name}-", dir=final.parent))
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(final.parent)
    return final


def discard_dir(tmp: Path) -> None:
    """Remove a temporary directory whose writing failed (nothing half-written is kept)."""
    shutil.rmtree(tmp, ignore_errors=True)


def atomic_dir(final: Path, write) -> Path:
    """Call ``write(tmp)`` on a fresh temporary sibling of ``final``, then rename it to
    ``final``. Returns ``final``; if ``write`` fails, the temporary is removed."""
    tmp = begin_dir(final)
    try:
        write(tmp)
    except BaseException:
        discard_dir(tmp)
        raise
    return commit_dir(tmp, final)


# --------------------------------------------------------------------- RNG state
def rng_to_files(folder: Path, rank: int) -> None:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state()
    save_file(tensors, str(folder / f"rng-rank{rank}.safetensors"))
    np_state = np.random.get_state()
    py_state = random.getstate()
    (folder / f"rng-rank{rank}.json").write_text(json.dumps({
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "python": [py_state[0], list(py_state[1]), py_state[2]]}))


def read_rng(folder: Path, rank: int) -> tuple | None:
    """This process's saved RNG states (torch, numpy, python), or None when the checkpoint
    lacks this rank (it was written by fewer processes)."""
    tfile = folder / f"rng-rank{rank}.safetensors"
    if not tfile.exists():
        return None
    check_regular(tfile, tfile.name)           # safetensors' open would block on a FIFO
    tensors = load_file(str(tfile))
    meta = read_json(folder / f"rng-rank{rank}.json", f"rng-rank{rank}.json",
                     MAX_METADATA_BYTES, max_depth=4)
    reason = rng_problem(meta, tensors)
    if reason:
        raise ValueError(reason)
    n, p = meta["numpy"], meta["python"]
    return (tensors["torch"], (n[0], np.array(n[1], dtype=np.uint32), *n[2:]),
            (p[0], tuple(p[1]), p[2]), tensors.get("cuda"))


def set_rng(states: tuple | None) -> None:
    """Restore RNG states returned by ``read_rng`` (None: leave them as they are)."""
    if states is None:
        return
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])
    if states[3] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(states[3])


def rng_from_files(folder: Path, rank: int) -> None:
    """Restore this process's RNG states (no-op when the checkpoint lacks this rank)."""
    set_rng(read_rng(folder, rank))


# ----------------------------------------------------------------------- listing
def step_dirs(out_dir: str | Path) -> list[tuple[int, Path]]:
    """Every ``step-*`` directory under ``out_dir/checkpoints``, oldest first, complete or
    not (temporaries are not listed)."""
    root = Path(out_dir) / "checkpoints"
    found = []
    if root.is_dir():
        for p in root.iterdir():
            m = STEP_DIR.match(p.name)
            if m and p.is_dir():
                found.append((int(m.group(1)), p))
    return sorted(found)


def list_checkpoints(out_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``out_dir/checkpoints``, oldest first (temporaries and
    directories without a trainer state are ignored)."""
    return [(step, p) for step, p in step_dirs(out_dir) if (p / STATE_FILE).is_file()]


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1][1] if found else None


def prune(out_dir: str | Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` complete checkpoints."""
    for _, path in list_checkpoints(out_dir)[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)


def read_state(path: Path) -> dict:
    return read_json(Path(path) / STATE_FILE, STATE_FILE, MAX_METADATA_BYTES)


# ------------------------------------------------------------------------ resuming
FORMAT = 2                 # trainer_state.json of a sharded checkpoint
_STATE_KEYS = {"step": int, "scheduler": dict, "recipe": dict, "optimizer": dict,
               "tensors": dict, "shards": dict, "data": dict}


@dataclass(frozen=True)
class ResumeState:
    """Everything a resumed run takes from one checkpoint directory, read and checked (the
    shards themselves are read into the run's tensors by ``sharded.load_shards``)."""

    path: Path
    step: int
    scheduler: dict
    recipe: dict
    groups: list               # the optimizer's parameter groups (``sharded.group_state``)
    tensors: dict              # key -> global shape of every saved parameter
    data: dict                 # the data-loader position (``GlobalOrder.position``)
    world_size: int
    rng: tuple | None          # this process's RNG states (``read_rng``)
    unverified: str | None = None   # why its content was not verified (no manifest)

    @property
    def shards(self) -> Path:
        return self.path / SHARDS_DIR


_READ_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError, SafetensorError)


def read_resume_state(path: Path, rank: int = 0) -> ResumeState:
    """Read and check the trainer state, the shards' files and the RNG states of checkpoint
    ``path``.

    Raises CheckpointDamaged naming the first file that is missing, truncated or not what it
    should hold (a shard of another size than was written, a header that does not read)."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        if (path / "optimizer.safetensors").is_file():
            raise CheckpointDamaged("it is in the layout before sharded checkpoints (model/ "
                                    "with weights, optimizer.safetensors), which --resume no "
                                    "longer reads; its model/ is a planner-loadable "
                                    "checkpoint to start a new run from")
        raise CheckpointDamaged(f"it has no {STATE_FILE}")
    try:
        state = read_json(state_file, STATE_FILE, MAX_METADATA_BYTES)
    except UserFileError as exc:
        raise CheckpointDamaged(f"{STATE_FILE} {exc.problem}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointDamaged(f"{STATE_FILE} is not a sharded checkpoint's (format "
                                f"{FORMAT})")
    bad = [k for k, kind in _STATE_KEYS.items() if not isinstance(state.get(k), kind)]
    if bad or not isinstance(state["optimizer"].get("param_groups"), list):
        raise CheckpointDamaged(f"{STATE_FILE} lacks {(bad or ['optimizer groups'])[0]}")
    reason = state_problem(state)
    if reason:
        raise CheckpointDamaged(f"{STATE_FILE}: {reason}")
    m = STEP_DIR.match(path.name)
    if m and int(m.group(1)) != state["step"]:
        raise CheckpointDamaged(f"{STATE_FILE} says step {state['step']}, the directory "
                                f"step {int(m.group(1))}")
    if not (path / MODEL_DIR / "config.json").is_file():
        raise CheckpointDamaged(f"{MODEL_DIR}/config.json is missing")
    reason = check_shards(path / SHARDS_DIR, state["shards"])
    if reason:
        raise CheckpointDamaged(reason)
    reason, verified = manifest_problem(path)
    if reason:
        raise CheckpointDamaged(reason)
    try:
        rng = read_rng(path, rank)
    except _READ_ERRORS as exc:
        raise CheckpointDamaged(f"its RNG state of rank {rank} cannot be read "
                                f"({_reason(exc)})") from None
    unverified = None if verified else (
        f"has no {MANIFEST_FILE} (it was written before checkpoints carried content "
        f"hashes), so its files are checked by size and header only")
    return ResumeState(path, state["step"], state["scheduler"], state["recipe"],
                       state["optimizer"]["param_groups"], state["tensors"], state["data"],
                       state.get("world_size", 1), rng, unverified)


def write_state(folder: Path, state: dict) -> None:
    """Write ``trainer_state.json`` (the last file of a checkpoint) with the shard sizes."""
    state = {"format": FORMAT, **state, "shards": shard_manifest(folder / SHARDS_DIR)}
    (folder / STATE_FILE).write_text(json.dumps(state, indent=1))


def seal(folder: Path) -> None:
    """Write the checkpoint's manifest (after every other file: the last write)."""
    write_manifest(folder)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.rstrip(".")
