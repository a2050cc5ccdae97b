"""Commit rules: which masked positions of a block take their predicted token this step.

Each rule maps (confidence (B, K) fp32, masked (B, K) bool, step, budget) to a (B, K) bool
commit mask that is a subset of ``masked``. They are written with masks, ``where`` and ranks
only (no ``.item()``, boolean indexing or ``nonzero``), so the reference and the fast decoder
share them and the fast step stays free of host synchronisation. On the last step of the
budget every masked position is committed, so a block always completes.
"""
from __future__ import annotations

from typing import Callable

import torch

from wamdiff2_core.decoding.config import COMMIT_RULES

Rule = Callable[..., torch.Tensor]


def transfer_schedule(block_size: int, steps: int) -> list[int]:
    """How many positions the static rules commit at each step: an even split of the block
    over the budget, the remainder on the first steps (sums to ``block_size``)."""
    steps = min(steps, block_size)
    base, extra = divmod(block_size, steps)
    return [base + (1 if s < extra else 0) for s in range(steps)]


def _masked_confidence(confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Confidence of the masked positions, -inf elsewhere (committed positions never win)."""
    return torch.where(masked, confidence, torch.full_like(confidence, float("-inf")))


def confidence_rank(confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Rank (0 = most confident) of each masked position among its row's masked positions;
    unmasked positions rank after all masked ones. Ties break towards the left."""
    key = _masked_confidence(confidence, masked)
    order = torch.argsort(key, dim=-1, descending=True, stable=True)       # (B, K)
    return torch.argsort(order, dim=-1, stable=True)                        # (B, K)


def position_rank(masked: torch.Tensor) -> torch.Tensor:
    """Rank of each masked position from the left among its row's masked positions."""
    return masked.long().cumsum(-1) - 1


def low_confidence_dynamic(confidence, masked, quota, last, threshold):
    """Commit every masked position with confidence >= threshold, and at least the single
    most confident masked one (the leftmost on ties: ``argmax`` returns the first maximum, the
    same position as rank 0 of ``confidence_rank``, without its two sorts)."""
    key = _masked_confidence(confidence, masked)
    top = torch.arange(key.shape[-1], device=key.device) == key.argmax(-1, keepdim=True)
    return masked & ((confidence >= threshold) | top | last)


def low_confidence_static(confidence, masked, quota, last, threshold):
    """Commit the ``quota`` most confident masked positions."""
    rank = confidence_rank(confidence, masked)
    return masked & ((rank < quota) | last)


def low_confidence_budget(confidence, masked, quota, last, threshold):
    """The dynamic rule with the static rule's floor: commit every masked position with
    confidence >= threshold, and at least the ``quota`` most confident masked ones. Confident
    positions go early as in the dynamic rule, but a block never takes more steps than its
    budget (``steps_per_block``): positions the model stays unsure of (e.g. a centimetre digit
    of a waypoint) are committed ``quota`` at a time instead of one per step."""
    rank = confidence_rank(confidence, masked)
    return masked & ((confidence >= threshold) | (rank < quota) | last)


def low_confidence_leftmost(confidence, masked, quota, last, threshold):
    """Commit every masked position with confidence >= threshold, and at least the ``quota``
    leftmost masked ones. Like ``low_confidence_budget`` a block finishes within its budget,
    but the positions the model is unsure of are decided left to right, each with every
    position before it settled. Where the layout of the text depends on earlier choices
    (how many digits a waypoint's integer part has), ranking unsure positions by confidence
    commits characters that assume a layout not yet chosen ("1..8", ",,"); on the bundled
    model's held-out frames this rule leaves fewer plans unparsed than the AR teacher at
    several times its tokens per forward (docs/benchmarks.md)."""
    return masked & ((confidence >= threshold) | (position_rank(masked) < quota) | last)


def low_confidence_frontier(confidence, masked, quota, last, threshold):
    """Commit every masked position with confidence >= threshold, and every masked position
    whose left neighbour was settled when the step's forward ran (the first position of
    each run of masked positions; a block's first position counts as settled on its left).

    Each run of unsure positions then grows from its left edge, one position per step, and
    all runs grow at once: a left-to-right decoder over each run, in parallel over the
    runs. A block takes about as many steps as its longest run of unsure positions, with no
    step budget to set (``steps_per_block`` still bounds it). Two unsure neighbours are
    never decided in the same step, which is where the quota rules write a waypoint's
    integer part as two independent guesses ("90.99" for 9.99 or 10.99). ``quota`` is not
    used: the frontier itself is the floor, and it always holds the first masked
    position, so every step commits at least one."""
    settled = torch.cat([torch.ones_like(masked[..., :1]), ~masked[..., :-1]], -1)
    return masked & ((confidence >= threshold) | settled | last)


def sequential(confidence, masked, quota, last, threshold):
    """Commit the ``quota`` leftmost masked positions."""
    return masked & ((position_rank(masked) < quota) | last)


COMMIT_RULE_FNS: dict[str, Rule] = {fn.__name__: fn for fn in (
    low_confidence_dynamic, low_confidence_static, low_confidence_budget,
    low_confidence_leftmost, low_confidence_frontier, sequential)}
if tuple(COMMIT_RULE_FNS) != COMMIT_RULES:          # the names are listed once, in config
    raise ImportError(f"commit rules {tuple(COMMIT_RULE_FNS)} differ from "
                      f"decoding.config.COMMIT_RULES {COMMIT_RULES}")


def unsettled(x: torch.Tensor, mask_id: int, eoa: int) -> torch.Tensor:
    """The masked positions (B, K) that can still change an answer: those before the row's
    first end-of-answer token. The answer ends there and every later position is dropped
    (``reference.finish_rows``), so once none is left the block's remaining steps cannot
    change a single answer token and both decoders stop denoising it. A row without an
    end-of-answer token keeps every masked position."""
    before_end = (x == eoa).long().cumsum(-1) == 0
    return (x == mask_id) & before_end


def commit_mask(rule: str, confidence: torch.Tensor, masked: torch.Tensor,
                quota: torch.Tensor | int, last: torch.Tensor | bool,
                threshold: float) -> torch.Tensor:
    """Dispatch to a named rule. ``quota`` and ``last`` may be 0-d tensors (no host sync)."""
    return COMMIT_RULE_FNS[rule](confidence, masked, quota, last, threshold)
