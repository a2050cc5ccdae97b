"""Processes and devices: one process, or several under torchrun (torch.distributed).

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK (on every node; ``--nnodes N --rdzv-backend
c10d --rdzv-endpoint HOST:PORT`` joins nodes); we join the process group (gloo on CPU, NCCL
on GPUs) and wrap the model with an existing engine: DDP, or FSDP2 (``parallel.py``); never
a home-made gradient exchange. ``train.strategy: auto`` takes DDP where the memory plan says
a whole replica fits a device and FSDP2 where it does not (``memory.auto_strategy``).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from wamdiff2_core.training.config import RecipeError


@dataclass
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    local_world: int = 1

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
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        cuda = torch.cuda.is_available()
        if cuda and local >= torch.cuda.device_count():
            raise RecipeError(f"this node runs {local_world} processes but has "
                              f"{torch.cuda.device_count()} GPU(s): start torchrun with "
                              f"--nproc_per_node {torch.cuda.device_count()} or fewer")
        device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        if world > 1 and not dist.is_initialized():
            _check_backend(cuda)
            dist.init_process_group(backend="nccl" if cuda else "gloo")
        return cls(rank=rank, world=world, local_rank=local, device=device,
                   local_world=local_world)

    def ensure_group(self) -> None:
        """A process group even for one process (FSDP2 shards over a mesh of one)."""
        if not dist.is_initialized():
            cuda = self.device.type == "cuda"
            _check_backend(cuda)
            dist.init_process_group(backend="nccl" if cuda else "gloo", store=dist.HashStore(),
                                    rank=0, world_size=1)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum of ``values`` over all processes (a copy)."""
        values = values.detach().clone()
        if self.active:
            device = values.device
            values = values.to(self.device)
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
            values = values.to(device)
        return values

    def gather_ints(self, values: list[int]) -> list[list[int]]:
        """Every process's ``values`` (the same length everywhere), by rank."""
        mine = torch.tensor(values, dtype=torch.int64, device=self.device)
        if not self.active:
            return [mine.tolist()]
        out = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(out, mine)
        return [t.tolist() for t in out]

    def agree(self, flag: bool) -> tuple[bool, bool]:
        """(every process's ``flag``, any process's ``flag``)."""
        if not self.active:
            return flag, flag
        both = torch.tensor([float(flag), -float(flag)], device=self.device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        return -float(both[1]) > 0, float(both[0]) > 0

    def close(self) -> None:
        close_process_group()


def _check_backend(cuda: bool) -> None:
    if not dist.is_available():
        raise RecipeError("this PyTorch build has no torch.distributed: train.strategy ddp "
                          "and fsdp cannot run here (train.strategy=none, one process)")
    if cuda and not dist.is_nccl_available():
        raise RecipeError("this PyTorch build has no NCCL, which training on several GPUs "
                          "needs: install a CUDA build of torch")


def close_process_group() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def check_strategy(strategy: str, ctx: DistContext) -> None:
    """RecipeError unless ``strategy`` (not ``auto``) can run with these processes."""
    if strategy == "ddp" and not ctx.active:
        raise RecipeError("train.strategy=ddp needs several processes (torchrun "
                          "--nproc_per_node N); one process trains with train.strategy=none "
                          "or fsdp")
    if strategy == "none" and ctx.active:
        raise RecipeError(f"train.strategy=none cannot train with {ctx.world} processes "
                          f"(each would train its own copy): use ddp, fsdp or auto")


def _ddp(module: torch.nn.Module, ctx: DistContext):
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def wrap(module: torch.nn.Module, strategy: str, ctx: DistContext, precision: str):
    """The training module for a strategy: the bare module (``none``), a DDP wrapper, or
    ``module`` itself sharded in place (``fsdp``)."""
    if strategy == "ddp":
        return _ddp(module, ctx)
    if strategy == "fsdp":
        from wamdiff2_core.training.parallel import apply_fsdp

        ctx.ensure_group()
        return apply_fsdp(module, ctx.device, ctx.world, precision)
    return module


def no_sync(module, skip: bool):
    """Skip DDP's gradient exchange for a non-final accumulation micro-step. FSDP2 reduces
    (and re-shards) every micro-step's gradients: holding them unsharded until the last one
    would keep a whole model's gradients on every process."""
    if skip and hasattr(module, "no_sync"):
        return module.no_sync()
    return contextlib.nullcontext()
