"""The set algebra of constrained block decoding, as tensor operations without host sync.

For a block of K positions entering in a set of states ``entry`` (R, S), each position i
has candidate tokens C_i: its committed token, or (masked) every token the language uses.
Working over the automaton's edges (E of them):

- forward sets F_0 = entry, F_{i+1} = {dst(e) : src(e) in F_i, tok(e) in C_i};
- backward sets G_K = states that can still finish in the token budget after the block,
  G_i = {src(e) : dst(e) in G_{i+1}, tok(e) in C_i};
- allowed tokens A_i = {tok(e) : src(e) in F_i, dst(e) in G_{i+1}}: a masked position may
  take exactly these and the whole answer stays completable.

Every set also meets ``ok`` (K+1, S): the states whose distance to DONE fits in the budget
left at that boundary, so an answer that could not end in ``max_new_tokens`` is never begun.
Sets are fp32 tensors of 0/1 (a product is an intersection; a union over edges is a
``scatter_reduce`` "amax", exact and order-free), which keeps a position's update at four
small kernels. Only ``index_select``/``scatter_reduce``/``where`` with integer indices are
used: no ``.item()``, ``nonzero`` or boolean indexing, so the fast decoder can compile or
capture these steps.
"""
from __future__ import annotations

import torch

from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.sampling import Temperature, choice_scores

NEG_INF = float("-inf")


def budget_ok(auto: DeviceAutomaton, offset: torch.Tensor | int, block: int,
              max_new: torch.Tensor | int) -> torch.Tensor:
    """(K+1, S) 0/1: states that can reach DONE in the tokens left after each boundary of
    the block at answer offset ``offset`` (past ``max_new_tokens`` only DONE is allowed)."""
    bounds = torch.arange(block + 1, device=auto.dist.device) + offset
    left = (max_new - bounds).clamp(min=0)                                   # (K+1,)
    return (auto.dist.unsqueeze(0) <= left.unsqueeze(-1)).float()


def edge_candidates(auto: DeviceAutomaton, x: torch.Tensor, mask_id: int) -> torch.Tensor:
    """(R, K, E) 0/1: edge e may be taken at position i (its token is the committed one,
    or the position is masked). A committed token outside the language matches no edge."""
    cols = auto.tok_col.index_select(0, x.reshape(-1)).view_as(x)            # (R, K)
    return ((x == mask_id).unsqueeze(-1) | (cols.unsqueeze(-1) == auto.col)).float()


def union(index: torch.Tensor, picked: torch.Tensor, size: int) -> torch.Tensor:
    """(..., size) 0/1: the targets ``index[e]`` of the edges picked in ``picked`` (..., E)."""
    acc = picked.new_zeros(picked.shape[:-1] + (size,))
    return acc.scatter_reduce_(-1, index.expand_as(picked), picked, "amax")


def sweep(gather: torch.Tensor, scatter: torch.Tensor, first: torch.Tensor,
          cand: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """(R, K+1, N) sets along a block: ``first`` (R, N), then set i+1 = the ``scatter``
    ends of the edges whose ``gather`` end is in set i and whose candidate flag in ``cand``
    (R, K, M) is on, met with ``ok`` (K, N). One iteration per position: four small kernels
    (what bounds a step's cost on a CPU or inside a CUDA graph)."""
    rows, k, _ = cand.shape
    out = first.new_zeros(rows, k + 1, first.shape[-1])
    sets, cands, oks = out.unbind(1), cand.unbind(1), ok.unbind(0)    # views, made once
    sets[0].copy_(first)
    index = scatter.expand(rows, -1)
    for i in range(k):
        moved = sets[i].index_select(1, gather).mul_(cands[i])              # (R, M)
        sets[i + 1].scatter_reduce_(1, index, moved, "amax").mul_(oks[i])
    return out


def forward_sets(auto: DeviceAutomaton, entry: torch.Tensor, cand: torch.Tensor,
                 ok: torch.Tensor) -> torch.Tensor:
    """(R, K+1, S) forward sets of a block from ``entry`` (R, S) over ``cand`` (R, K, E)."""
    return sweep(auto.src, auto.dst, entry * ok[0], cand, ok[1:])


def block_sets(auto: DeviceAutomaton, entry: torch.Tensor, cand: torch.Tensor,
               ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward sets (each (R, K+1, S)) of a block, in one sweep: the forward
    sets run left to right beside the backward sets right to left (the backward sets are
    forward sets of the reversed automaton), so a step pays K iterations for both.

    Backward set G_i holds the states from which positions i..K-1 can be completed and
    the answer finished in its budget."""
    n, k = auto.n_states, cand.shape[1]
    rows = cand.shape[0]
    first = torch.cat([entry * ok[0], ok[k].expand(rows, -1)], -1)           # (R, 2S)
    both = torch.cat([cand, cand.flip(1)], -1)                               # (R, K, 2E)
    oks = torch.cat([ok[1:], ok[:-1].flip(0)], -1)                           # (K, 2S)
    out = sweep(auto.both_gather, auto.both_scatter, first, both, oks)
    return out[..., :n], out[..., n:].flip(1)


def backward_sets(auto: DeviceAutomaton, cand: torch.Tensor, ok: torch.Tensor
                  ) -> torch.Tensor:
    """(R, K+1, S) backward sets alone (see ``block_sets``)."""
    rows, k = cand.shape[0], cand.shape[1]
    first = ok[k].expand(rows, -1).contiguous()
    return sweep(auto.dst, auto.src, first, cand.flip(1), ok[:-1].flip(0)).flip(1)


def allowed_tokens(auto: DeviceAutomaton, fwd: torch.Tensor, bwd: torch.Tensor
                   ) -> torch.Tensor:
    """(R, K, C) bool: the columns a masked position may take (meaningful where masked)."""
    rows, k = fwd.shape[0], fwd.shape[1] - 1
    flat = (lambda t: t.reshape(rows * k, -1))                 # 2-D: the fast index kernels
    live = flat(fwd[:, :-1]).index_select(1, auto.src) * \
        flat(bwd[:, 1:]).index_select(1, auto.dst)                          # (R K, E)
    return (union(auto.col, live, auto.n_cols) > 0).view(rows, k, -1)


def column_logits(auto: DeviceAutomaton, logits: torch.Tensor) -> torch.Tensor:
    """(R, K, C) fp32 logits of the language's tokens (from logits (R, K, V))."""
    return logits.float().index_select(-1, auto.col_tok)


def token_probability(auto: DeviceAutomaton, col_logits: torch.Tensor, x: torch.Tensor
                      ) -> torch.Tensor:
    """(R, K) softmax over the language's columns (``col_logits`` (R, K, C)) at each token
    of ``x`` (R, K); 0 where ``x`` holds an id outside the language (the mask)."""
    cols = auto.tok_col.index_select(0, x.reshape(-1)).view_as(x)             # (R, K)
    probs = torch.softmax(col_logits, dim=-1).gather(-1, cols.clamp_min(0).unsqueeze(-1))
    return torch.where(cols >= 0, probs.squeeze(-1), torch.zeros_like(probs.squeeze(-1)))


def choose(auto: DeviceAutomaton, col_logits: torch.Tensor, allowed: torch.Tensor,
           temperature: Temperature, generator: torch.Generator | None = None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens, confidences and choice scores under the restriction.

    Logits outside ``allowed`` are -inf before the softmax, so a forced token has
    confidence 1. Greedy at temperature 0; otherwise Gumbel-max sampling, the confidence
    being the untempered probability (as ``sampling.choose_tokens``; ``temperature`` may be
    an (R,) tensor, one per row). Returns tokens (R, K)
    vocabulary ids, confidences (R, K) fp32 and the scores (R, K, C) the choice maximised
    (for the budget-end fill)."""
    none = ~allowed.any(-1, keepdim=True)                 # infeasible: no NaN, never used
    lg = torch.where(allowed, col_logits, torch.where(none, 0.0, NEG_INF))
    probs = torch.softmax(lg, dim=-1)                                        # (R, K, C)
    scores = choice_scores(lg, temperature, generator)
    cols = scores.argmax(-1)                                                 # (R, K)
    conf = probs.gather(-1, cols.unsqueeze(-1)).squeeze(-1)
    return auto.col_tok.index_select(0, cols.reshape(-1)).view_as(cols), conf, scores


def feasible(auto: DeviceAutomaton, entry: torch.Tensor, x: torch.Tensor, mask_id: int,
             ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether block ``x`` (R, K) can still be completed: (R,) bool, and the forward set at
    its end (R, S) (the exit state once the block is fully committed)."""
    exit_set = forward_sets(auto, entry, edge_candidates(auto, x, mask_id), ok)[:, -1]
    return exit_set.amax(-1) > 0, exit_set


def fill_left_to_right(auto: DeviceAutomaton, entry: torch.Tensor, x: torch.Tensor,
                       mask_id: int, bwd: torch.Tensor, scores: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Commit every masked position, left to right, each to its best-scoring token among
    those still allowed given the fills before it (the budget-end fill; with ``bwd`` the
    backward sets of ``x``, which filling from the left leaves unchanged). Returns the
    block (R, K) and its exit set (R, S)."""
    rows, k = x.shape
    into = bwd[:, 1:].reshape(rows * k, -1).index_select(1, auto.dst).view(rows, k, -1)
    fixed = auto.tok_col.index_select(0, x.reshape(-1)).view_as(x)           # (R, K)
    masked = x == mask_id
    state, cols = entry, []
    for i in range(k):
        live = state.index_select(1, auto.src).mul_(into[:, i])              # (R, E)
        allow = union(auto.col, live, auto.n_cols)                           # (R, C)
        best = torch.where(allow > 0, scores[:, i], NEG_INF).argmax(-1)      # (R,)
        col = torch.where(masked[:, i], best, fixed[:, i])
        state = union(auto.dst, live.mul_(auto.col == col.unsqueeze(-1)), auto.n_states)
        cols.append(col)
    cols = torch.stack(cols, 1)
    filled = auto.col_tok.index_select(0, cols.clamp(min=0).reshape(-1)).view_as(x)
    return torch.where(masked, filled, x), state


def feasible_prefix(fwd_picked: torch.Tensor, bwd: torch.Tensor) -> torch.Tensor:
    """(R, K) bool: the positions left of the longest completable run of picks.

    ``fwd_picked`` are the forward sets of the block with every pick committed, ``bwd`` the
    backward sets of the block before the picks: the picks left of boundary p are
    completable with the rest of the block iff F_p meets G_p, which holds for p = 0 (the
    block as it is) and, once false, stays false to the right; so the run ends at the
    last boundary where it holds."""
    meets = (fwd_picked * bwd).amax(-1) > 0                                  # (R, K+1)
    ends = meets.long().sum(-1, keepdim=True) - 1                            # (R, 1)
    return torch.arange(fwd_picked.shape[1] - 1, device=ends.device) < ends
