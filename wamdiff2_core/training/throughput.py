"""Throughput per logged step: tokens/s, samples/s and, on GPUs, model FLOPs utilisation.

MFU counts the model's FLOPs only (PaLM's convention: a recomputed forward under activation
checkpointing is not counted): ``6 N`` per token for the student's forward and backward and
``2 N_teacher`` for a distillation teacher's forward, with ``N`` the parameters outside the
input embedding (a table lookup); attention's own FLOPs are left out. The peak is the GPU's
dense bf16 tensor-core rate from its datasheet, per device, times the number of processes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Dense bf16 tensor-core FLOP/s by the start of the device's name (datasheets, no sparsity).
PEAK_BF16 = {"NVIDIA H200": 989e12, "NVIDIA H100": 989e12, "NVIDIA A100": 312e12,
             "NVIDIA L40S": 362e12, "NVIDIA A10G": 70e12, "NVIDIA L4": 121e12}


def peak_flops(device: torch.device, precision: str) -> float | None:
    """The device's peak bf16 FLOP/s, or None (a CPU, fp32 training, an unknown GPU)."""
    if device.type != "cuda" or precision != "bf16":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if name.startswith(k)), None)


def matmul_params(hf) -> int:
    """Parameters that multiply every token: all but the input embedding table (once, even
    when the output layer shares it)."""
    embed = hf.get_input_embeddings().weight
    return sum(p.numel() for p in hf.parameters() if p is not embed)


@dataclass
class Throughput:
    """Accumulates tokens and samples between two logged steps."""

    flops_per_token: float           # model FLOPs per student token (forward + backward)
    peak: float | None               # FLOP/s of all processes together, or None
    tokens: float = 0.0
    samples: int = 0

    def add(self, tokens: float, samples: int) -> None:
        self.tokens += tokens
        self.samples += samples

    def rates(self, seconds: float) -> dict[str, float]:
        """tokens_per_s, samples_per_s (and mfu) since the last call; then starts again."""
        seconds = max(seconds, 1e-9)
        out = {"tokens_per_s": self.tokens / seconds, "samples_per_s": self.samples / seconds}
        if self.peak:
            out["mfu"] = self.flops_per_token * self.tokens / seconds / self.peak
        self.tokens, self.samples = 0.0, 0
        return out
