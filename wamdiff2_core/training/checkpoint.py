"""Training checkpoints, written atomically and without pickle.

``OUT/checkpoints/step-00000120/`` holds:

- ``model/``: a planner-loadable checkpoint directory (``save_pretrained``, safetensors);
- ``optimizer.safetensors`` + ``optimizer.json``: the optimizer's tensors and the rest of its
  state (param groups, scalar state);
- ``rng-rank<r>.safetensors`` + ``rng-rank<r>.json``: every process's RNG states (torch,
  numpy, python);
- ``trainer_state.json``: step, scheduler state, the recipe; written last.

Everything is first written to ``.tmp-step-00000120`` and renamed into place, so a directory
named ``step-*`` is always complete; a half-written ``.tmp-*`` left by a killed run is never
picked up (and is removed by the next save), one left by a failed write (a full disk) is
removed at once.

A ``step-*`` directory can still be damaged afterwards (a disk error, a truncated copy, a
hand edit): ``read_resume_state`` reads and checks every file a resume needs and raises
``CheckpointDamaged`` naming the file, so the trainer can fall back to an older checkpoint.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

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
        old = final.parent / f".old-{final.name}"
        shutil.rmtree(old, ignore_errors=True)
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


# --------------------------------------------------------------- optimizer state
def optimizer_to_files(state: dict, folder: Path) -> None:
    """Write an optimizer state_dict as safetensors (tensors) + JSON (everything else)."""
    tensors, scalars = {}, {}
    for idx, entry in state["state"].items():
        for name, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{name}"] = value
    save_file(tensors, str(folder / "optimizer.safetensors"))
    (folder / "optimizer.json").write_text(json.dumps(
        {"param_groups": state["param_groups"], "scalars": scalars}))


def optimizer_from_files(folder: Path) -> dict:
    meta = json.loads((folder / "optimizer.json").read_text())
    state: dict[int, dict] = {}
    for key, value in load_file(str(folder / "optimizer.safetensors")).items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for key, value in meta["scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


# --------------------------------------------------------------------- RNG state
def rng_to_files(folder: Path, rank: int) -> None:
    save_file({"torch": torch.get_rng_state()}, str(folder / f"rng-rank{rank}.safetensors"))
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
    torch_state = load_file(str(tfile))["torch"]
    meta = json.loads((folder / f"rng-rank{rank}.json").read_text())
    n, p = meta["numpy"], meta["python"]
    return (torch_state, (n[0], np.array(n[1], dtype=np.uint32), *n[2:]),
            (p[0], tuple(p[1]), p[2]))


def set_rng(states: tuple | None) -> None:
    """Restore RNG states returned by ``read_rng`` (None: leave them as they are)."""
    if states is None:
        return
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


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
    return json.loads((Path(path) / STATE_FILE).read_text())


# ------------------------------------------------------------------------ resuming
@dataclass(frozen=True)
class ResumeState:
    """Everything a resumed run takes from one checkpoint directory, read and checked."""

    path: Path
    step: int
    scheduler: dict
    recipe: dict
    optimizer: dict            # an optimizer state_dict (tensors loaded)
    rng: tuple | None          # this process's RNG states (``read_rng``)


_READ_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError, SafetensorError)


def read_resume_state(path: Path, rank: int = 0) -> ResumeState:
    """Read trainer state, optimizer state and RNG states of checkpoint ``path`` whole.

    Raises CheckpointDamaged naming the first file that is missing, truncated or not what
    it should hold (the model directory is only checked for its files here; loading it is
    the caller's).
    """
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointDamaged(f"it has no {STATE_FILE}")
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointDamaged(f"{STATE_FILE} is not valid JSON ({exc})") from None
    m = STEP_DIR.match(path.name)
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) \
            or not isinstance(state.get("scheduler"), dict) \
            or not isinstance(state.get("recipe"), dict):
        raise CheckpointDamaged(f"{STATE_FILE} does not hold a step, a scheduler and a recipe")
    if m and int(m.group(1)) != state["step"]:
        raise CheckpointDamaged(f"{STATE_FILE} says step {state['step']}, the directory "
                                f"step {int(m.group(1))}")
    model = path / MODEL_DIR
    if not (model / "config.json").is_file() or not any(model.glob("*.safetensors")):
        raise CheckpointDamaged(f"{MODEL_DIR}/ has no config.json or no *.safetensors")
    try:
        optimizer = optimizer_from_files(path)
    except _READ_ERRORS as exc:
        raise CheckpointDamaged(f"its optimizer state (optimizer.safetensors, optimizer.json) "
                                f"cannot be read ({_reason(exc)})") from None
    try:
        rng = read_rng(path, rank)
    except _READ_ERRORS as exc:
        raise CheckpointDamaged(f"its RNG state of rank {rank} cannot be read "
                                f"({_reason(exc)})") from None
    return ResumeState(path, state["step"], state["scheduler"], state["recipe"], optimizer,
                       rng)


def check_optimizer_state(state: dict, groups: list[list[torch.Tensor]]) -> None:
    """CheckpointDamaged unless an optimizer state_dict fits parameter groups ``groups``
    (as many groups, as many parameters in each, every state tensor shaped like its
    parameter)."""
    saved = state.get("param_groups")
    if not isinstance(saved, list) or len(saved) != len(groups) or any(
            not isinstance(g, dict) or len(g.get("params", ())) != len(params)
            for g, params in zip(saved, groups)):
        raise CheckpointDamaged("its optimizer state does not match the model's parameter "
                                "groups")
    by_id = {i: p for g, params in zip(saved, groups) for i, p in zip(g["params"], params)}
    for idx, entry in state["state"].items():
        param = by_id.get(idx)
        if param is None:
            raise CheckpointDamaged(f"its optimizer state names parameter {idx}, which the "
                                    f"model does not have")
        for name, value in entry.items():
            if torch.is_tensor(value) and value.ndim and value.shape != param.shape:
                raise CheckpointDamaged(f"optimizer tensor {idx}.{name} has shape "
                                        f"{tuple(value.shape)}, its parameter "
                                        f"{tuple(param.shape)}")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.rstrip(".")
