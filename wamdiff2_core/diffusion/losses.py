"""Training losses of the diffusion stages.

- ``masked_ce``: the block-diffusion ELBO term: cross-entropy on masked positions only,
  weighted per position (1/t), summed per sample and normalised by the sample's answer
  length. Returns one value per sample so callers can average over any global batch.
- Divergences between a teacher and a student distribution per position, after dividing the
  logits by a temperature tau and scaled by tau^2 (so gradients keep their size as tau
  changes), registered by name: ``jsd`` (the beta-skewed Jensen-Shannon divergence,
  symmetric at beta = 0.5), ``forward_kl`` KL(teacher || student) and ``reverse_kl``
  KL(student || teacher).
- ``distill_loss``: (1 - lambda) CE + lambda D, both masked, weighted and normalised alike.

Everything is computed in float32 whatever the autocast dtype of the logits.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F


def masked_ce(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor,
              weight: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per-sample ELBO cross-entropy, (B,).

    logits (B, A, V) at the corrupted positions, targets (B, A) clean ids, masked (B, A)
    bool, weight (B, A) per-position weight, lengths (B,) answer lengths (normaliser).
    """
    ce = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, A)
    return (ce * masked * weight).sum(-1) / lengths.clamp(min=1)


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last axis from log-probabilities; (...,)."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def forward_kl(teacher_logp: torch.Tensor, student_logp: torch.Tensor,
               beta: float) -> torch.Tensor:
    """KL(teacher || student) per position (mode-covering)."""
    return _kl(teacher_logp, student_logp)


def reverse_kl(teacher_logp: torch.Tensor, student_logp: torch.Tensor,
               beta: float) -> torch.Tensor:
    """KL(student || teacher) per position (mode-seeking)."""
    return _kl(student_logp, teacher_logp)


def jsd(teacher_logp: torch.Tensor, student_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """beta-skewed Jensen-Shannon divergence per position: with M = beta P + (1 - beta) Q
    (P teacher, Q student), beta KL(P || M) + (1 - beta) KL(Q || M)."""
    log_m = torch.logsumexp(torch.stack([teacher_logp + math.log(beta),
                                         student_logp + math.log(1.0 - beta)]), dim=0)
    return beta * _kl(teacher_logp, log_m) + (1.0 - beta) * _kl(student_logp, log_m)


DIVERGENCES: dict[str, Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = {
    "jsd": jsd, "forward_kl": forward_kl, "reverse_kl": reverse_kl}


def divergence(name: str, teacher_logits: torch.Tensor, student_logits: torch.Tensor,
               temperature: float = 1.0, beta: float = 0.5) -> torch.Tensor:
    """Per-position divergence (...,) between teacher and student logits (..., V), at
    temperature tau and scaled by tau^2."""
    try:
        fn = DIVERGENCES[name]
    except KeyError:
        raise ValueError(f"unknown divergence {name!r}; known: "
                         f"{', '.join(sorted(DIVERGENCES))}") from None
    t_logp = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    s_logp = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return fn(t_logp, s_logp, beta) * temperature ** 2


def distill_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                 targets: torch.Tensor, masked: torch.Tensor, weight: torch.Tensor,
                 lengths: torch.Tensor, lam: float, name: str = "jsd",
                 temperature: float = 1.0, beta: float = 0.5
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample (1 - lam) CE + lam D on masked positions; returns (loss, ce, d), each (B,).

    The teacher logits are detached here: the teacher never receives a gradient.
    """
    ce = masked_ce(student_logits, targets, masked, weight, lengths)
    d_pos = divergence(name, teacher_logits.detach(), student_logits, temperature, beta)
    d = (d_pos * masked * weight).sum(-1) / lengths.clamp(min=1)                # (B,)
    return (1.0 - lam) * ce + lam * d, ce, d
