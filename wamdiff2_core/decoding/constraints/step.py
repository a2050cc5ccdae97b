"""One constrained denoising step of a block, as the reference and the fast decoder run it.

Both follow the same rule (docs/decoding.md, "Constrained decoding"):

1. restrict each masked position's logits to the tokens that keep the whole answer
   completable (``sets.allowed_tokens``), then choose tokens and confidences;
2. on a step before the last of the budget: let the commit rule pick positions; if the
   picks together leave no completion, commit the picks left of the first conflict: the
   longest run of picks, from the left, that is still completable with the rest of the
   block as it is (never empty: the leftmost pick is allowed on its own);
3. on the last step of the budget: fill every masked position left to right, each with
   its best token among those still allowed after the fills before it (when the picks of
   "commit all" are jointly completable this is exactly them).

``reference_step`` does it plainly: host branches per row, a binary search for the longest
completable run of picks, and the fill walking the automaton on the host, position by
position. ``fast_step`` does it with masks and ``where``: the longest completable run of
picks read off the forward sets of the picks and the backward sets of the block
(``sets.feasible_prefix``), and the one-pass fill, with no host synchronisation. Tests
check that they give the same tokens.
"""
from __future__ import annotations

import torch

from wamdiff2_core.decoding.constraints import sets
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.remasking import commit_mask


def _restricted(auto, entry, x, mask_id, ok, col_logits, temperature, gen):
    cand = sets.edge_candidates(auto, x, mask_id)                            # (R, K, E)
    fwd, bwd = sets.block_sets(auto, entry, cand, ok)
    allowed = sets.allowed_tokens(auto, fwd, bwd)                            # (R, K, C)
    tokens, conf, scores = sets.choose(auto, col_logits, allowed, temperature, gen)
    return bwd, tokens, conf, scores


def reference_step(auto: DeviceAutomaton, entry: torch.Tensor, x: torch.Tensor,
                   col_logits: torch.Tensor, mask_id: int, ok: torch.Tensor, rule: str,
                   quota: int, last: bool, threshold: float, temperature: float,
                   gen: torch.Generator | None) -> torch.Tensor:
    """The block after one constrained step (plain control flow; see the module doc)."""
    masked = x == mask_id
    _, tokens, conf, scores = _restricted(auto, entry, x, mask_id, ok, col_logits,
                                          temperature, gen)
    if last:
        return _fill_plain(auto, entry, x, mask_id, ok, scores)
    commit = commit_mask(rule, conf, masked, quota, False, threshold)
    position = torch.arange(x.shape[1], device=x.device)
    out = []
    for r in range(x.shape[0]):
        def picks_left_of(p: int) -> torch.Tensor:
            return torch.where(commit[r] & (position < p), tokens[r], x[r])

        def completable(p: int) -> bool:
            return bool(sets.feasible(auto, entry[r:r + 1], picks_left_of(p).unsqueeze(0),
                                      mask_id, ok)[0])

        lo, hi = 0, x.shape[1]            # the largest completable p: binary search (fewer
        while lo < hi:                    # picks never turn a completable block otherwise)
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if completable(mid) else (lo, mid - 1)
        out.append(picks_left_of(lo))
    return torch.stack(out)


def _fill_plain(auto, entry, x, mask_id, ok, scores) -> torch.Tensor:
    """Fill masked positions left to right with host-side walks of the automaton: the
    states after the filled prefix, and the moves from them into the backward sets of the
    block (the positions right of the one being filled do not change)."""
    bwd = sets.backward_sets(auto, sets.edge_candidates(auto, x, mask_id), ok) > 0
    moves: dict[int, list[tuple[int, int]]] = {}
    for s, c, n in zip(auto.src.tolist(), auto.col.tolist(), auto.dst.tolist()):
        moves.setdefault(s, []).append((c, n))
    col_of = auto.tok_col.tolist()
    x = x.clone()
    for r in range(x.shape[0]):
        states = set(torch.nonzero(entry[r] > 0).flatten().tolist())
        for i in range(x.shape[1]):
            into = bwd[r, i + 1].tolist()
            options = sorted({c for s in states for c, n in moves.get(s, ()) if into[n]})
            if int(x[r, i]) == mask_id:
                row = scores[r, i].tolist()
                best = max(options, key=lambda c: row[c])     # the lowest column on ties
                x[r, i] = int(auto.col_tok[best])
            else:
                best = col_of[int(x[r, i])]
            states = {n for s in states for c, n in moves.get(s, ()) if c == best and into[n]}
    return x


def exit_set(auto: DeviceAutomaton, entry: torch.Tensor, x: torch.Tensor, mask_id: int,
             ok: torch.Tensor) -> torch.Tensor:
    """(R, S) the state after a fully committed block: the next block's entry."""
    return sets.feasible(auto, entry, x, mask_id, ok)[1]


def fast_step(auto: DeviceAutomaton, entry: torch.Tensor, x: torch.Tensor,
              col_logits: torch.Tensor, mask_id: int, ok: torch.Tensor, rule: str,
              quota: torch.Tensor | int, last: bool, threshold: torch.Tensor | float,
              temperature: float, gen: torch.Generator | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The block after one constrained step and its exit set (the entry of the next block
    once this step completes it; otherwise not used), without host synchronisation. ``last`` is known on the
    host (the step count), so the fill runs only on the last step of the budget."""
    masked = x == mask_id
    bwd, tokens, conf, scores = _restricted(auto, entry, x, mask_id, ok, col_logits,
                                            temperature, gen)
    if last:
        return sets.fill_left_to_right(auto, entry, x, mask_id, bwd, scores)
    commit = commit_mask(rule, conf, masked, quota, False, threshold)
    picked = torch.where(commit, tokens, x)
    fwd = sets.forward_sets(auto, entry, sets.edge_candidates(auto, picked, mask_id), ok)
    keep = sets.feasible_prefix(fwd, bwd)                                    # (R, K)
    return torch.where(commit & keep, tokens, x), fwd[:, -1]
