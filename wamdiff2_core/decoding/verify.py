"""The verifier of exact decoding: which model it is, its greedy choice over a drafted block,
and what of the block it accepts. Shared by the reference and the fast exact decoders
(``exact.py``, ``fast_exact.py``); every function here is written with masks, ``gather`` and
``where`` (no ``.item()``, boolean indexing or ``nonzero``), so the fast step stays free of
host synchronisation.

The verifier is a next-token model: the AR teacher (a second checkpoint) or the drafter
itself read with block size 1 (``self_verifier``). Its greedy answer is what exact decoding
returns, token for token; with a language to enforce, its choice at each position is the
best token that keeps the answer completable in the budget, exactly as the AR decoders'
constrained choice (``constraints.step``: a one-position block filled at once).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from wamdiff2_core.decoding.constraints import sets
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.output import DecodeStats
from wamdiff2_core.decoding.sampling import choose_tokens

#: ``--verifier self``: the drafter read as a next-token model.
SELF = "self"
#: Where a diffusion checkpoint ships its AR teacher: the default verifier.
AR_TEACHER_SUBDIR = "ar_teacher"


@dataclass
class ExactStats(DecodeStats):
    """``DecodeStats`` of an exact decode. ``blocks`` counts verify rounds of the batch,
    ``row_blocks`` the rounds summed over the rows still decoding in them (so
    ``accepted_per_block`` is per row), ``verify_forwards`` the verifier's forwards (also
    counted in ``forwards``, beside the drafter's denoising steps and commit passes),
    ``drafts`` the blocks the drafter drafted."""
    verify_forwards: int = 0
    row_blocks: int = 0
    drafts: int = 0

    @property
    def accepted_per_block(self) -> float:
        """Answer tokens gained per row and round (the first is the verifier's own)."""
        return self.tokens / max(1, self.row_blocks)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "accepted_per_block": self.accepted_per_block}


def self_verifier(model):
    """``model``'s weights read as a next-token model (block size 1, causal): the verifier
    that needs no second model."""
    return model.with_fields(source="exact mode: self verifier", paradigm="ar", block_size=1)


def load_verifier(model, spec: str | Path | None = None):
    """The verifier of ``model`` named by ``spec``: a checkpoint directory, ``"self"``
    (``self_verifier``), or None: the AR teacher that ``model``'s checkpoint ships in
    ``ar_teacher/``, else ``"self"``. A checkpoint is loaded on ``model``'s device and dtype
    with its token ids (eoa, mask, pad) and checked (``check_verifier``).

    Raises:
        CheckpointError: the directory is not a loadable checkpoint.
        ValueError: the verifier does not share ``model``'s tokenizer, or is not next-token.
    """
    from wamdiff2_core.model.modeling import Wamdiff2Model

    if spec is None:
        shipped = Path(model.origin or ".") / AR_TEACHER_SUBDIR
        spec = shipped if (shipped / "config.json").is_file() else SELF
    if str(spec) == SELF:
        return self_verifier(model)
    f = model.fields
    verifier = Wamdiff2Model.from_pretrained(
        spec, device=model.device, dtype=next(model.hf.parameters()).dtype,
        fields={"eoa_token_id": f.eoa_token_id, "mask_token_id": f.mask_token_id,
                "pad_token_id": f.pad_token_id})
    check_verifier(model, verifier)
    return verifier


def _vocab_rows(model) -> int:
    return model.hf.get_output_embeddings().weight.shape[0]


def check_verifier(drafter, verifier) -> None:
    """ValueError (one sentence) unless ``verifier`` is a next-token model that reads the
    drafter's prompts as the drafter does: the same tokens (vocabulary, end-of-answer id,
    logits per position), the same image preprocessing and the same prompt format."""
    if verifier.fields.paradigm != "ar":
        raise ValueError(f"the verifier {verifier.origin or 'model'} is a "
                         f"{verifier.fields.paradigm} model; exact mode verifies with a "
                         "next-token (ar) model")
    if verifier.device != drafter.device:
        raise ValueError(f"the verifier is on {verifier.device} and the drafter on "
                         f"{drafter.device}; exact mode needs both on one device")
    a, b = drafter.processor, verifier.processor
    differs = [what for what, same in (
        ("vocabulary", a.tokenizer.get_vocab() == b.tokenizer.get_vocab()),
        ("end-of-answer id", drafter.fields.eoa_token_id == verifier.fields.eoa_token_id),
        ("logits per position", _vocab_rows(drafter) == _vocab_rows(verifier)),
        ("image preprocessing", a.config == b.config),
        ("prompt format", a.prompt_ids("<image>x", [1]) == b.prompt_ids("<image>x", [1])))
        if not same]
    if differs:
        raise ValueError(f"the verifier {verifier.origin or 'model'} does not share the "
                         f"drafter's tokenizer ({', '.join(differs)} differ), so it cannot "
                         "verify the drafter's tokens")


def row_budget(auto: DeviceAutomaton, offsets: torch.Tensor, length: int, max_new: int
               ) -> torch.Tensor:
    """``sets.budget_ok`` per row: (length + 1, R, S), the states that can still finish at
    each boundary of a block of ``length`` positions starting at answer ``offsets`` (R,)."""
    return sets.budget_ok(auto, offsets.view(-1, 1), length, max_new).transpose(0, 1)


def path_states(auto: DeviceAutomaton, entry: torch.Tensor, x: torch.Tensor, mask_id: int,
                ok: torch.Tensor) -> torch.Tensor:
    """(R, K+1, S) the automaton's states after each prefix of block ``x`` (R, K) from
    ``entry`` (R, S), within the budget ``ok`` (``row_budget``): empty after a token that
    leaves the language or cannot finish in time."""
    return sets.forward_sets(auto, entry, sets.edge_candidates(auto, x, mask_id), ok)


def greedy_choice(logits: torch.Tensor, mask_id: int, auto: DeviceAutomaton | None = None,
                  states: torch.Tensor | None = None, offset: torch.Tensor | None = None,
                  max_new: int = 0) -> torch.Tensor:
    """The verifier's greedy tokens (R, n) from its logits (R, n, V) at n consecutive
    positions: the AR decoders' choice (mask id excluded). With ``auto``: position i chooses
    answer token ``offset + i`` (``offset`` (R,)) from the language states ``states``
    (R, n, S) before it, and takes the best token that leaves the answer completable in
    ``max_new`` tokens (ties to the lowest column, as the AR decoders' constrained fill)."""
    if auto is None:
        return choose_tokens(logits, mask_id, 0.0)[0]
    n = logits.shape[1]
    ok_next = row_budget(auto, offset + 1, n - 1, max_new).transpose(0, 1)  # (R, n, S)
    # allowed_tokens pairs fwd[:, i] with bwd[:, i + 1]: one spare boundary on each side
    fwd = torch.cat([states, states[:, :1]], 1)
    bwd = torch.cat([ok_next[:, :1], ok_next], 1)
    allowed = sets.allowed_tokens(auto, fwd, bwd)                          # (R, n, C)
    return sets.choose(auto, sets.column_logits(auto, logits), allowed, 0.0)[0]


def guesses(logits: torch.Tensor, choice: torch.Tensor, mask_id: int,
            states: torch.Tensor | None = None) -> torch.Tensor:
    """(R, n) the verifier's tokens to guess with after a verify (``take_choices``): its
    choices ``choice`` (R, n), except where the drafted path had left the answer's language
    (``states`` (R, n, S) empty before the position), where a constrained choice means
    nothing and the plain greedy token (of ``logits`` (R, n, V)) guesses instead."""
    if states is None:
        return choice
    plain = choose_tokens(logits, mask_id, 0.0)[0]
    return torch.where(states.amax(-1) > 0, choice, plain)


def accept(x: torch.Tensor, choice: torch.Tensor, pos: torch.Tensor, done: torch.Tensor,
           eoa: int, max_new: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the verifier accepts of drafted blocks ``x`` (R, K) whose first token is its own
    choice, given ``choice`` (R, K): its greedy token after each prefix ``x[:, :i + 1]``.

    Accepted: the first token and the longest run after it that equals the verifier's
    choices, cut after an end-of-answer token and at the budget (answer offset ``pos`` (R,)
    of ``max_new_tokens``); nothing for rows already ``done``. Returns the accepted counts
    (R,), the rows done after them (R,) and the verifier's next token after them (R,)."""
    k = x.shape[1]
    agree = (x[:, 1:] == choice[:, :-1]).long().cumprod(-1).sum(-1) + 1        # (R,)
    is_end = x == eoa
    has_end = is_end.any(-1)
    end_at = torch.where(has_end, is_end.long().argmax(-1) + 1, k)           # tokens to end
    count = torch.minimum(torch.minimum(agree, end_at), max_new - pos)
    count = torch.where(done, 0, count)
    now_done = done | (has_end & (end_at <= count)) | (pos + count >= max_new)
    nxt = choice.gather(1, (count - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return count, now_done, nxt


def needs_draft(start: torch.Tensor, done: torch.Tensor, block: int, min_tail: int
                ) -> torch.Tensor:
    """() bool: whether a new block must be drafted, because a row still decoding has fewer
    than ``min_tail`` drafted tokens left in the last draft after its position ``start``
    (R,) in it (the position the verifier's next token takes)."""
    return ((block - 1 - start < min_tail) & ~done).any()


def verify_input(window: torch.Tensor, start: torch.Tensor, done: torch.Tensor, width: int,
                 mask_id: int, eoa: int) -> torch.Tensor:
    """(R, width) the tokens a verify reads: the draft ``window`` (R, K) from each row's
    position ``start`` (R,) in it (which holds the verifier's own next token), then mask
    tokens past its end (never accepted: the verifier never chooses the mask);
    end-of-answer for rows ``done``."""
    k = window.shape[1]
    at = start.unsqueeze(-1) + torch.arange(width, device=window.device)      # (R, W)
    x = torch.where(at < k, window.gather(1, at.clamp(max=k - 1)), mask_id)
    return torch.where(done.unsqueeze(-1), eoa, x)


def take_choices(window: torch.Tensor, start: torch.Tensor, choice: torch.Tensor,
                 count: torch.Tensor, done: torch.Tensor,
                 lookahead: bool | torch.Tensor = True) -> torch.Tensor:
    """The draft ``window`` (R, K) with a verify's choices (R, W) written over it (rows not
    ``done``): choice i, the verifier's token after the verify's first i + 1 tokens, at
    window position ``start + i + 1``. Up to the accepted run (``count`` (R,) tokens) they
    equal the draft; at its end stands the verifier's next token, always written; after it,
    with ``lookahead``, the verifier's guesses given the draft as it was: a mismatch (a
    wrong digit) rarely spoils them, and the next verify reads them instead of the
    drafter's tokens."""
    k, w = window.shape[1], choice.shape[1]
    i = torch.arange(k, device=window.device) - start.unsqueeze(-1) - 1        # (R, K)
    wanted = (i == (count - 1).unsqueeze(-1)) | lookahead
    take = wanted & (i >= 0) & (i < w) & ~done.unsqueeze(-1)
    return torch.where(take, choice.gather(1, i.clamp(0, w - 1)), window)
