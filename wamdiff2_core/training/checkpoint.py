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
picked up (and is removed by the next save).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

STEP_DIR = re.compile(r"^step-(\d{8})$")
STATE_FILE = "trainer_state.json"


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


def atomic_dir(final: Path, write) -> Path:
    """Call ``write(tmp)`` on a fresh temporary sibling of ``final``, then rename it to
    ``final``. Returns ``final``."""
    tmp = begin_dir(final)
    write(tmp)
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


def rng_from_files(folder: Path, rank: int) -> None:
    """Restore this process's RNG states (no-op when the checkpoint lacks this rank)."""
    tfile = folder / f"rng-rank{rank}.safetensors"
    if not tfile.exists():
        return
    torch.set_rng_state(load_file(str(tfile))["torch"])
    meta = json.loads((folder / f"rng-rank{rank}.json").read_text())
    n = meta["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
    p = meta["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))


# ----------------------------------------------------------------------- listing
def list_checkpoints(out_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``out_dir/checkpoints``, oldest first (temporaries and
    directories without a trainer state are ignored)."""
    root = Path(out_dir) / "checkpoints"
    found = []
    if root.is_dir():
        for p in root.iterdir():
            m = STEP_DIR.match(p.name)
            if m and (p / STATE_FILE).is_file():
                found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1][1] if found else None


def prune(out_dir: str | Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` complete checkpoints."""
    for _, path in list_checkpoints(out_dir)[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)


def read_state(path: Path) -> dict:
    return json.loads((Path(path) / STATE_FILE).read_text())
