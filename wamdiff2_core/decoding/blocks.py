"""The buffers every fast block decoder's state holds (the diffusion decoder's and exact mode's
drafter's): the two-block inputs of a block forward and a block's step schedule. Allocated
once per state, written in place between and inside the steps (a captured step reads them at
fixed addresses)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from wamdiff2_core.decoding.cancel import check_cancel
from wamdiff2_core.decoding.static_cache import StaticKVCache
from wamdiff2_core.decoding.static_model import Prefix, StaticTextModel


@dataclass
class BlockInputs:
    """The inputs of a block forward, two blocks wide (Bb rows, K positions a block): the
    right half is the block being denoised (``x``, ``cos``, ``sin``, ``slots`` are views of
    it), the left half the block finished before it, which a fused first step commits in the
    same forward (``forward`` with a ``Prefix``)."""
    x2: torch.Tensor            # (Bb, 2K) token ids
    cos2: torch.Tensor          # (Bb, 2K, D) rotary rows
    sin2: torch.Tensor          # (Bb, 2K, D)
    slots2: torch.Tensor        # (Bb, 2K) cache slots the keys/values are written at
    kv_len: torch.Tensor        # (Bb,) keys the block sees (its own included)
    kv_len_prev: torch.Tensor   # (Bb,) keys the finished block sees
    block: int
    x: torch.Tensor = field(init=False)       # (Bb, K) views of the right half
    cos: torch.Tensor = field(init=False)
    sin: torch.Tensor = field(init=False)
    slots: torch.Tensor = field(init=False)

    def __post_init__(self):
        k = self.block
        self.x, self.cos, self.sin, self.slots = (t[:, k:] for t in (self.x2, self.cos2,
                                                                     self.sin2, self.slots2))

    @classmethod
    def allocate(cls, text: StaticTextModel, batch: int, block: int, fill: int
                 ) -> "BlockInputs":
        """Inputs of ``batch`` rows, tokens ``fill``; distinct slots and non-empty key ranges
        from the start: the warm-up runs of the steps must write finite keys (a masked NaN
        value still poisons attention)."""
        long = dict(dtype=torch.long, device=text.device)
        width = 2 * block
        cos2 = torch.zeros(batch, width, text.head_dim, dtype=text.dtype, device=text.device)
        return cls(x2=torch.full((batch, width), fill, **long), cos2=cos2,
                   sin2=torch.zeros_like(cos2),
                   slots2=torch.arange(width, **long).repeat(batch, 1),
                   kv_len=torch.full((batch,), width, **long),
                   kv_len_prev=torch.full((batch,), block, **long), block=block)

    def shift(self, slots: torch.Tensor) -> None:
        """The block just denoised becomes the left half, its keys/values to be written at
        ``slots`` (Bb, K) (its own, or scratch where a position is not to be kept)."""
        k = self.block
        for t in (self.x2, self.cos2, self.sin2):
            t[:, :k].copy_(t[:, k:])
        self.slots2[:, :k].copy_(slots)

    def forward(self, text: StaticTextModel, cache: StaticKVCache, attention,
                prefix: Prefix | None = None, **kw) -> torch.Tensor:
        """Logits of the block (Bb, K, V) against ``cache``, its keys/values written at its
        slots; with ``prefix``, one forward of both halves that also commits the finished
        block (``StaticTextModel.forward``)."""
        if prefix is None:
            return text.forward(self.x, self.cos, self.sin, self.slots, self.kv_len, cache,
                                attention, **kw)
        return text.forward(self.x2, self.cos2, self.sin2, self.slots2, self.kv_len, cache,
                            attention, prefix=prefix, **kw)


@dataclass
class BlockSchedule:
    """A block's denoising schedule on the device, read by the captured steps: the steps
    taken, the commit quota of each step (static rules), the step budget, the rules'
    threshold, and whether a masked position is left (the host's done-check)."""
    step: torch.Tensor          # (1,) steps taken in this block
    quotas: torch.Tensor        # (K,) commit quota per step
    n_steps: torch.Tensor       # (1,) the block's step budget
    threshold: torch.Tensor     # () float32
    pending: torch.Tensor       # () bool
    block: int

    @classmethod
    def allocate(cls, block: int, device: torch.device) -> "BlockSchedule":
        long = dict(dtype=torch.long, device=device)
        return cls(step=torch.zeros(1, **long), quotas=torch.ones(block, **long),
                   n_steps=torch.full((1,), block, **long),
                   threshold=torch.full((), 0.9, dtype=torch.float32, device=device),
                   pending=torch.ones((), dtype=torch.bool, device=device), block=block)

    def load(self, quotas: list[int], threshold: float) -> None:
        """A decode's schedule (``remasking.transfer_schedule``) and threshold."""
        self.quotas[:len(quotas)] = torch.tensor(quotas)
        self.n_steps.fill_(len(quotas))
        self.threshold.fill_(threshold)

    def quota(self) -> torch.Tensor:
        """(1,) this step's commit quota; sync-free."""
        return self.quotas.gather(0, self.step.clamp(max=self.block - 1))


def run_block_steps(step: Callable[[int], object], budget: int, sync_every: int,
                    pending: torch.Tensor, forwards: int) -> int:
    """Run ``step(i)`` for i = 0, 1, ... until ``budget`` steps ran or, read every
    ``sync_every`` steps (the host's one wait), ``pending`` (a masked position left) is
    False; a cancel flag is checked before each (``forwards``: the forwards run before).
    Returns the steps run."""
    steps = 0
    while steps < budget:
        for _ in range(min(sync_every, budget - steps)):
            check_cancel(forwards + steps)
            step(steps)
            steps += 1
        if not bool(pending):                  # the done-check, every sync_every steps
            break
    return steps
