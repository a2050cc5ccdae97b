"""Per-block masking noise for block-diffusion training.

Every answer block of a sample gets one mask ratio t drawn stratified (antithetic) over the
blocks of that sample: with n blocks and one uniform offset u, the blocks get the n evenly
spaced points ``(u + j / n) mod 1`` mapped onto (eps, 1], so every sample sees low and high
noise at once and the ELBO estimate has low variance. Every token of a block is then masked
with probability ``schedule.mask_prob(t)``. Positions past a sample's own answer (batch
padding) are never masked and carry no loss.

Randomness comes from one ``torch.Generator`` per sample, seeded by the caller from (run seed,
step, global sample index): a sample is corrupted identically whichever process, micro-batch
or resumed run handles it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class LinearSchedule:
    """Mask probability t, ELBO weight 1/t (the masked-diffusion loss of MDLM / LLaDA)."""

    def mask_prob(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def weight(self, t: torch.Tensor) -> torch.Tensor:
        return 1.0 / t


SCHEDULES = {"linear": LinearSchedule}


def get_schedule(name: str):
    """The noise schedule called ``name``; a ValueError listing the known ones otherwise."""
    try:
        return SCHEDULES[name]()
    except KeyError:
        raise ValueError(f"unknown noise schedule {name!r}; known: "
                         f"{', '.join(sorted(SCHEDULES))}") from None


@dataclass
class Corruption:
    xt: torch.Tensor          # (B, A) x0 with masked positions replaced by the mask id
    masked: torch.Tensor      # (B, A) bool, True where xt holds the mask id
    t: torch.Tensor           # (B, A) mask ratio of each position's block (1 on padding)
    weight: torch.Tensor      # (B, A) ELBO weight of each position (0 on padding)


def stratified_ratios(n_blocks: int, eps: float, gen: torch.Generator) -> torch.Tensor:
    """(n_blocks,) mask ratios in (eps, 1], one per block, evenly spaced from one offset."""
    u = torch.rand((), generator=gen)
    r = (u + torch.arange(n_blocks, dtype=torch.float64) / n_blocks) % 1.0   # [0, 1)
    return (eps + (1.0 - eps) * (1.0 - r)).float()


def corrupt(x0: torch.Tensor, lengths: torch.Tensor, block_size: int, mask_id: int,
            generators: list[torch.Generator], eps: float = 1e-3,
            schedule=LinearSchedule()) -> Corruption:
    """Mask the answers ``x0`` (B, A) block by block.

    lengths: (B,) answer length of each row (a multiple of ``block_size``; positions past it
    are batch padding). Every row gets at least one masked position (otherwise its loss would
    be zero): if the draw masks nothing, one position chosen by the row's generator is masked.
    """
    bsz, a = x0.shape
    xt, masked = x0.clone(), torch.zeros_like(x0, dtype=torch.bool)
    t_all = torch.ones(bsz, a)
    for i in range(bsz):
        n = int(lengths[i])
        if n % block_size:
            raise ValueError(f"answer length {n} is not a multiple of block {block_size}")
        gen = generators[i]
        t = stratified_ratios(n // block_size, eps, gen).repeat_interleave(block_size)  # (n,)
        draw = torch.rand(n, generator=gen) < schedule.mask_prob(t)
        if not draw.any():
            draw[torch.randint(n, (), generator=gen)] = True
        masked[i, :n] = draw
        t_all[i, :n] = t
    xt[masked] = mask_id
    weight = schedule.weight(t_all)
    valid = torch.arange(a).unsqueeze(0) < lengths.unsqueeze(1)                # (B, A)
    return Corruption(xt=xt, masked=masked, t=t_all, weight=weight * valid)


def sample_generators(seed: int, step: int, indices: list[int]) -> list[torch.Generator]:
    """One generator per sample, seeded from (run seed, step, global sample index)."""
    gens = []
    for idx in indices:
        words = np.random.SeedSequence([seed, step, int(idx)]).generate_state(2, np.uint32)
        g = torch.Generator()
        g.manual_seed(int(words[0]) << 31 | int(words[1]) >> 1)
        gens.append(g)
    return gens
