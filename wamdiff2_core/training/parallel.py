"""How a model is laid over processes: FSDP2, activation checkpointing, mixed precision.

One place for the shape torchtitan gives its ``parallelisms/``: ``fully_shard`` on every text
decoder layer and every vision block, then on the root (embeddings, LM head, norms, the
vision patch embedding and mergers), with one mixed-precision policy; activation
checkpointing per layer and block through transformers' own switch (the layers are
``GradientCheckpointingLayer``s: parameter names stay as they are, so checkpoints do not
depend on it). Everything here is torch's: no home-made collective.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from typing import Iterable, Iterator

import torch
from torch import nn


def shard_units(hf: nn.Module) -> list[nn.Module]:
    """The modules that become FSDP units before the root: each text decoder layer and each
    vision block of a Qwen3-VL model, in forward order (vision first)."""
    return [*hf.model.visual.blocks, *hf.model.language_model.layers]


def mixed_precision(device: torch.device, precision: str):
    """FSDP2's policy: bf16 parameters and compute with fp32 gradient reduction on a GPU
    under ``train.precision: bf16``; None (fp32 throughout) otherwise, on the CPU too."""
    if device.type != "cuda" or precision != "bf16":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def apply_fsdp(hf: nn.Module, device: torch.device, world: int, precision: str) -> nn.Module:
    """Shard ``hf`` in place over all ``world`` processes (units first, the root last);
    returns ``hf``, now an ``FSDPModule`` whose parameters are DTensors."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    policy = mixed_precision(device, precision)
    # The logits of the kept positions are a view; nothing writes into them in place, which is
    # what the warning (once per forward) is about.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    kw = {"mesh": mesh} if policy is None else {"mesh": mesh, "mp_policy": policy}
    for unit in shard_units(hf):
        fully_shard(unit, **kw)
    fully_shard(hf, **kw)
    return hf


def enable_activation_checkpointing(hf: nn.Module) -> None:
    """Recompute each decoder layer's and vision block's activations in the backward pass
    (non-reentrant checkpoints; in training mode only, so decoding keeps its cache)."""
    hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


def is_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


@contextlib.contextmanager
def gathered(module: nn.Module) -> Iterator[None]:
    """Every FSDP unit of ``module`` all-gathered and kept so: forwards inside run without
    collectives, so each process may run as many as it needs (on-policy decoding stops at
    its own answers' ends). A no-op for a module that is not sharded."""
    if not is_sharded(module):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in module.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True, recurse=False)


def _local_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of ``grads`` over every process (a DTensor norm is made whole)."""
    from torch.distributed.tensor import DTensor

    norm = torch.nn.utils.get_total_norm(grads, 2.0)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def clip_gradients(groups: Iterable[list[nn.Parameter]], clip: float) -> torch.Tensor:
    """Scale the gradients of every parameter in ``groups`` so that their joint 2-norm is at
    most ``clip`` (``math.inf``: measure only); returns that norm before clipping.

    A group is a list of parameters of one kind: sharded (DTensor) gradients and plain ones
    cannot share one norm computation, so each group's norm is taken alone and the joint
    norm is their root sum of squares (the same number one ``clip_grad_norm_`` over all of
    them would give)."""
    groups = [[p for p in g if p.grad is not None] for g in groups]
    groups = [g for g in groups if g]
    if not groups:
        return torch.zeros(())
    norms = [_local_norm([p.grad for p in g]) for g in groups]
    total = norms[0] if len(norms) == 1 else torch.stack(
        [n.to(norms[0].device) for n in norms]).square().sum().sqrt()
    if math.isfinite(clip):
        for g in groups:
            torch.nn.utils.clip_grads_with_norm_(g, clip, total.to(g[0].grad.device))
    return total
