"""Training state <-> ``torch.distributed.checkpoint`` shards in safetensors, without pickle.

The tensors of a run (the student's parameters ``model/<name>``, the vision aux head's
``aux/<name>``, and each one's AdamW state ``optim/<key>/<state>``) go through
``torch.distributed.checkpoint`` with its safetensors storage (``HuggingFaceStorageWriter``
with ``save_distributed``): every process writes the slice it holds to its own
``shard-0000<r+1>-...safetensors``, nothing is gathered, and the slices' offsets live in the
safetensors headers, so the reader can hand any other number of processes their slices (DCP's
default storage would pickle its metadata). Names are the unwrapped module's, the same under
none, DDP and FSDP2, so a checkpoint resumes under another strategy and world size. The rest
of the optimizer (its parameter groups) is JSON, kept by the caller.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

SHARDS_DIR = "shards"


def named_parameters(hf: nn.Module, head: nn.Module | None) -> list[tuple[str, nn.Parameter]]:
    """Every trained parameter under its checkpoint key (tied weights once)."""
    out = [(f"model/{n}", p) for n, p in hf.named_parameters()]
    if head is not None:
        out += [(f"aux/{n}", p) for n, p in head.named_parameters()]
    return out


def tensor_shapes(named: list[tuple[str, nn.Parameter]]) -> dict[str, list[int]]:
    """Key -> global shape (a DTensor's whole shape, not its slice)."""
    return {k: list(p.shape) for k, p in named}


def init_optimizer_state(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]
                         ) -> None:
    """Create the optimizer's state of ``params`` (as their first step would) without
    changing a weight or any other parameter's state: one step in which only they have a
    gradient (zeros) at learning rate 0, so a checkpoint can be read into that state in
    place (the step counters it sets are read over too)."""
    params = [p for p in params if p not in optimizer.state]
    if not params:
        return
    lrs = [g["lr"] for g in optimizer.param_groups]
    for p in params:
        p.grad = torch.zeros_like(p)
    for g in optimizer.param_groups:
        g["lr"] = 0.0
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, lrs):
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)


def optimizer_keys(named: list[tuple[str, nn.Parameter]], optimizer: torch.optim.Optimizer
                   ) -> list[str]:
    """Keys of the parameters that have optimizer state (some may never have had a
    gradient yet)."""
    return [k for k, p in named if optimizer.state.get(p)]


def state_tensors(named: list[tuple[str, nn.Parameter]], optimizer: torch.optim.Optimizer
                  ) -> dict[str, torch.Tensor]:
    """Key -> tensor of every parameter and optimizer state tensor (views: reading a
    checkpoint into them restores the run in place). Scalars are 1-element views."""
    out: dict[str, torch.Tensor] = {k: p.detach() for k, p in named}
    for key, p in named:
        for name, value in optimizer.state.get(p, {}).items():
            if torch.is_tensor(value):
                out[f"optim/{key}/{name}"] = value.view(1) if value.ndim == 0 else value
    return out


def group_state(optimizer: torch.optim.Optimizer, named: list[tuple[str, nn.Parameter]]
                ) -> list[dict]:
    """The optimizer's parameter groups as JSON: hyper-parameters and parameter keys."""
    keys = {id(p): k for k, p in named}
    groups = []
    for g in optimizer.param_groups:
        entry = {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()
                 if k != "params"}
        entry["params"] = [keys[id(p)] for p in g["params"]]
        groups.append(entry)
    return groups


def restore_groups(optimizer: torch.optim.Optimizer, saved: list[dict],
                   named: list[tuple[str, nn.Parameter]]) -> str | None:
    """Set each group's hyper-parameters from ``saved``; the reason they do not fit this
    optimizer (other groups or parameters), or None."""
    current = group_state(optimizer, named)
    if len(saved) != len(current):
        return f"it has {len(saved)} optimizer groups, the run {len(current)}"
    for s, c in zip(saved, current):
        if s.get("params") != c["params"]:
            return f"its optimizer group '{s.get('name')}' holds other parameters"
    for g, s in zip(optimizer.param_groups, saved):
        for k, v in s.items():
            if k != "params":
                g[k] = tuple(v) if isinstance(g.get(k), tuple) else v
    return None


def _no_dist(process_local: bool) -> bool:
    return process_local or not (dist.is_available() and dist.is_initialized())


def save_shards(folder: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write this process's slices of ``tensors`` under ``folder``; every process of the
    run calls it (a single process writes alone)."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.HuggingFaceStorageWriter(str(folder), save_distributed=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)   # "assuming ... a single process"
            dcp.save(tensors, storage_writer=writer, no_dist=_no_dist(False))
    except CheckpointException as exc:
        raise _first_failure(exc) from exc


def _first_failure(exc: CheckpointException) -> BaseException:
    """The exception a process raised inside DCP (a full disk is an OSError there; DCP's
    own exception is no ``Exception`` at all), so that callers see what went wrong."""
    for failure in getattr(exc, "failures", {}).values():
        inner = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(inner, BaseException):
            return inner
    return exc


def load_shards(folder: Path, tensors: dict[str, torch.Tensor],
                process_local: bool = False) -> None:
    """Read ``tensors`` (any subset of the saved keys) in place from the shards in
    ``folder``, whatever number of processes wrote them; ``process_local``: this process
    alone reads (the others are not taking part)."""
    import torch.distributed.checkpoint as dcp

    reader = dcp.HuggingFaceStorageReader(str(folder))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(tensors, storage_reader=reader, no_dist=_no_dist(process_local))
    except CheckpointException as exc:
        raise _first_failure(exc) from exc


def shard_manifest(folder: Path) -> dict[str, int]:
    """File name -> size of every shard in ``folder``."""
    return {p.name: p.stat().st_size for p in sorted(Path(folder).glob("*.safetensors"))}


def check_shards(folder: Path, manifest: dict) -> str | None:
    """Why the shards in ``folder`` are not the ones ``manifest`` lists (a file missing, cut
    short, or with a header that does not read), or None."""
    from safetensors import safe_open

    if not isinstance(manifest, dict) or not manifest:
        return "its trainer state lists no shards"
    for name, size in manifest.items():
        path = Path(folder) / name
        if not path.is_file():
            return f"shard {SHARDS_DIR}/{name} is missing"
        got = path.stat().st_size
        if got != size:
            return f"shard {SHARDS_DIR}/{name} has {got} bytes, {size} were written"
        try:
            with safe_open(str(path), framework="pt") as f:
                f.keys()
        except Exception as exc:  # noqa: BLE001 - safetensors raises several kinds
            return f"shard {SHARDS_DIR}/{name} cannot be read ({exc})"
    return None
