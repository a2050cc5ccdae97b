"""Processes and devices: one process, or several under torchrun (torch.distributed).

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; we join the process group (gloo on CPU, NCCL on
GPUs) and wrap the model with an existing engine: DDP on CPU, FSDP on GPUs (``strategy:
auto``), never a home-made gradient exchange.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @classmethod
    def from_env(cls) -> "DistContext":
        """Join the process group torchrun describes in the environment (if any)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available()
        device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        if world > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo")
        return cls(rank=rank, world=world, local_rank=local, device=device)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum of ``values`` over all processes (a copy)."""
        values = values.detach().clone()
        if self.active:
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def close(self) -> None:
        close_process_group()


def close_process_group() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def resolve_strategy(strategy: str, ctx: DistContext) -> str:
    """``auto`` -> none for one process, FSDP on GPUs, DDP otherwise."""
    if strategy != "auto":
        return strategy
    if not ctx.active:
        return "none"
    return "fsdp" if ctx.device.type == "cuda" else "ddp"


def _ddp(module: torch.nn.Module, ctx: DistContext):
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def _fsdp(module: torch.nn.Module, ctx: DistContext):
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel(module, device_id=ctx.device, use_orig_params=True)


WRAPPERS = {"none": lambda module, ctx: module, "ddp": _ddp, "fsdp": _fsdp}


def wrap(module: torch.nn.Module, strategy: str, ctx: DistContext):
    """The training module for a strategy (the bare module for ``none``)."""
    if strategy != "none" and not ctx.active:
        return module
    return WRAPPERS[strategy](module, ctx)


def no_sync(module, skip: bool):
    """Skip the gradient exchange for a non-final accumulation micro-step."""
    if skip and hasattr(module, "no_sync"):
        return module.no_sync()
    return contextlib.nullcontext()
