"""Memory measured against the plan, once per run (after its first step).

Every process sums the bytes it holds of the student's parameters, their gradients and the
optimizer's state (a sharded tensor counts its local slice), and on a GPU the peak the
allocator reached; the first process writes them beside each process's planned bytes to
``OUT/memory.json`` and logs one line. The plan's parameter, gradient and optimizer bytes
must equal the measured ones (``test/training/test_fsdp.py``); the GPU peak is what the
activation estimate is checked against (``scripts/gpu_check.sh``, step ``fsdp``).
"""
from __future__ import annotations

import json
from dataclasses import replace

import torch

from wamdiff2_core.training.memory import GIB, PlanSetup, plan, workload_for

MEASURED = ("parameters", "gradients", "optimizer", "peak")


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def measure(trainer) -> dict[str, int]:
    """This process's bytes of parameters, gradients, optimizer state and its GPU peak."""
    params = list(trainer.model.hf.parameters())
    optim = sum(_local_bytes(v) for p in params for v in trainer.optimizer.state.get(p, {})
                .values() if torch.is_tensor(v))
    peak = (torch.cuda.max_memory_allocated(trainer.ctx.device)
            if trainer.ctx.device.type == "cuda" else 0)
    return {"parameters": sum(_local_bytes(p) for p in params),
            "gradients": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": optim, "peak": peak}


def memory_report(trainer, name: str) -> dict | None:
    """Measure every process, compare with the plan; the first process writes
    ``memory.json`` and returns the report (the others: None)."""
    ctx, r = trainer.ctx, trainer.recipe
    mine = measure(trainer)
    everyone = ctx.gather_ints([mine[k] for k in MEASURED])
    if not ctx.is_main:
        return None
    student, teacher = trainer.plan_inputs
    setup = PlanSetup(trainer.strategy, ctx.world, 0, ctx.device.type == "cuda",
                      r.train.precision, r.train.micro_batch, trainer.placement or "replicated")
    work = workload_for(r, student, setup)
    ac = "checkpointing" if r.train.activation_checkpointing else "no_checkpointing"
    ranks = []
    for rank, values in enumerate(everyone):
        p = plan(student, teacher, replace(setup, rank=rank), work)
        ranks.append({"measured": dict(zip(MEASURED, values)),
                      "planned": {k: p.items[k] for k in MEASURED[:3]},
                      "planned_total": p.total(ac == "checkpointing")})
    same = all(x["measured"][k] == x["planned"][k] for x in ranks for k in MEASURED[:3])
    report = {"strategy": trainer.strategy, "world_size": ctx.world,
              "activation_checkpointing": r.train.activation_checkpointing,
              "as_planned": same, "ranks": ranks}
    (trainer.out / "memory.json").write_text(json.dumps(report, indent=1))
    m = ranks[0]["measured"]
    peak = (f", peak {m['peak'] / GIB:.2f} GiB (planned {ranks[0]['planned_total'] / GIB:.2f})"
            if m["peak"] else "")
    trainer.log(f"[{name}] memory of process 0: parameters {m['parameters'] / GIB:.3f} GiB, "
                f"gradients {m['gradients'] / GIB:.3f} GiB, optimizer "
                f"{m['optimizer'] / GIB:.3f} GiB{peak}"
                + ("" if same else " (not as planned: see memory.json)"))
    return report
