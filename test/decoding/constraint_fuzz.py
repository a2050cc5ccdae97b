"""Helpers of the constrained-decoding tests: random small regular languages over random
small vocabularies, a plain-Python oracle of the set algebra, and a block-decoding loop
driven by random logits (the decoders' loop without a model)."""
from __future__ import annotations

import random
import re

import torch

from wamdiff2_core.decoding.config import DecodeConfig, resolve_decode
from wamdiff2_core.decoding.constraints.compile import compile_tokens
from wamdiff2_core.decoding.constraints.session import FastConstraint, ReferenceConstraint
from wamdiff2_core.decoding.remasking import transfer_schedule
from wamdiff2_core.tasks.languages import AnswerLanguage

EOA, MASK = 0, 1
ALPHABET = "abcd"


# ------------------------------------------------------------------ random languages
def random_regex(rng: random.Random, depth: int = 3) -> str:
    """A random regular expression over ``ALPHABET`` (concatenation, alternation, option,
    star, bounded repetition)."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(ALPHABET)
    kind = rng.choice(["cat", "cat", "alt", "opt", "star", "rep"])
    if kind == "cat":
        return "".join(random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3)))
    if kind == "alt":
        return "(?:" + "|".join(random_regex(rng, depth - 1)
                                for _ in range(rng.randint(2, 3))) + ")"
    inner = "(?:" + random_regex(rng, depth - 1) + ")"
    if kind == "opt":
        return inner + "?"
    if kind == "star":
        return inner + "*"
    lo = rng.randint(0, 2)
    return inner + f"{{{lo},{lo + rng.randint(0, 3)}}}"


def random_vocab(rng: random.Random) -> dict[int, bytes]:
    """Ids 0 (end of answer) and 1 (mask) are special; then every letter, some multi-letter
    pieces and a token outside the alphabet."""
    pieces = list(ALPHABET) + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 3)))
                               for _ in range(rng.randint(2, 8))] + ["z"]
    pieces = list(dict.fromkeys(pieces))
    rng.shuffle(pieces)
    return {i + 2: p.encode() for i, p in enumerate(pieces)}


def random_language(rng: random.Random, min_tokens: int = 3):
    """(language, vocab, host automaton) of a random regex whose shortest answer takes at
    least ``min_tokens`` tokens (end of answer included)."""
    while True:
        regex = random_regex(rng, depth=4)
        vocab = random_vocab(rng)
        lang = AnswerLanguage(f"random:{regex}", regex)
        try:
            host = compile_tokens(lang, vocab, EOA)
        except ValueError:
            continue
        if host.min_tokens >= min_tokens:
            return lang, vocab, host


# ------------------------------------------------------------------ the oracle
def oracle_sets(host, entry: set[int], x: list[int], ok: list[set[int]]):
    """Forward sets, backward sets and allowed tokens of one block, with Python sets."""
    table: dict[int, dict[int, int]] = {}
    for s, t, n in host.edges:
        table.setdefault(s, {})[t] = n

    def moves(s, tok):
        ts = table.get(s, {})
        return ts.items() if tok == MASK else ([(tok, ts[tok])] if tok in ts else [])

    k = len(x)
    fwd = [entry & ok[0]]
    for i in range(k):
        fwd.append({n for s in fwd[-1] for _, n in moves(s, x[i])} & ok[i + 1])
    bwd = [None] * k + [ok[k]]
    for i in range(k - 1, -1, -1):
        bwd[i] = {s for s in table if any(n in bwd[i + 1] for _, n in moves(s, x[i]))} & ok[i]
    allowed = [{t for s in fwd[i] for t, n in table.get(s, {}).items() if n in bwd[i + 1]}
               for i in range(k)]
    return fwd, bwd, allowed


def oracle_ok(host, offset: int, block: int, max_new: int) -> list[set[int]]:
    return [{s for s in range(host.n_states) if host.dist[s] <= max(max_new - offset - i, 0)}
            for i in range(block + 1)]


def as_sets(t: torch.Tensor) -> list[set[int]]:
    """(K+1, S) 0/1 tensor -> list of index sets."""
    return [set(torch.nonzero(row > 0).flatten().tolist()) for row in t]


# ------------------------------------------------------------------ decoding loop
def in_language(lang: AnswerLanguage, vocab: dict[int, bytes], ids: list[int],
                max_new: int, eoa: int = EOA) -> bool:
    """``ids`` (an answer of ``max_new`` or more tokens, block padded) is a word of the
    language, then end-of-answer up to the end, the first end-of-answer within budget."""
    if eoa not in ids[:max_new]:
        return False
    cut = ids.index(eoa)
    if any(t != eoa for t in ids[cut:]) or any(t not in vocab for t in ids[:cut]):
        return False
    return re.fullmatch(lang.regex, b"".join(vocab[t] for t in ids[:cut]).decode()) is not None


def random_logits(gen: torch.Generator, rows: int, block: int, vocab_size: int
                  ) -> torch.Tensor:
    """Logits (R, K, V) with a random sharpness per row, so that some positions are
    confident (many picks per step, joint conflicts) and some are not."""
    scale = torch.rand(rows, 1, 1, generator=gen) * 12
    return torch.randn(rows, block, vocab_size, generator=gen) * scale


def decode_blocks(auto, rows: int, block: int, max_new: int, cfg: DecodeConfig,
                  backend: str, seed: int, vocab_size: int, eoa: int = EOA,
                  mask: int = MASK) -> tuple[list[list[int]], int]:
    """Decode ``rows`` answers of ``max_new`` tokens with random logits, block by block,
    as the decoders do: "reference" through ``ReferenceConstraint``, "fast" through
    ``FastConstraint`` (the fast decoder's buffers, padded with two DONE rows). Returns
    the answers (block padded) and the number of steps."""
    cfg = resolve_decode(cfg, None)                  # no checkpoint: the defaults fill it
    logit_gen = torch.Generator().manual_seed(seed)
    choice_gen = torch.Generator().manual_seed(seed + 1)
    schedule = transfer_schedule(block, cfg.steps_per_block or block)
    if backend == "reference":
        cons = ReferenceConstraint(auto, mask, eoa, cfg, rows)
    else:
        cons = FastConstraint(auto, rows + 2, block, mask, eoa)
        cons.start(max_new, rows)
        xbuf = torch.full((rows + 2, block), eoa, dtype=torch.long)
    finished = torch.zeros(rows, dtype=torch.bool)
    out, steps = [], 0
    for b in range(-(-max_new // block)):
        x = torch.where(finished.unsqueeze(-1), eoa, mask).expand(-1, block).clone()
        if backend == "reference":
            cons.begin_block(b * block, block)
        else:
            cons.begin_block(b * block)
            xbuf[:rows] = x
        for s, quota in enumerate(schedule):
            if not (x == mask).any():
                break
            logits = random_logits(logit_gen, rows, block, vocab_size)
            last = s == len(schedule) - 1
            if backend == "reference":
                x = cons.step(x, logits, quota, last, choice_gen)
            else:
                cols = cons.take_logits(torch.cat([logits, torch.zeros_like(logits[:1]).expand(2, -1, -1)]))
                view = xbuf if cfg.temperature == 0 else xbuf[:rows]
                cons.step(view, cols[:view.shape[0]], cfg.commit_rule, torch.tensor([quota]),
                          last, torch.tensor(cfg.threshold), cfg.temperature, choice_gen)
                x = xbuf[:rows].clone()
            steps += 1
        if backend == "reference":
            cons.end_block(x)
        out.append(x)
        finished |= (x == eoa).any(-1)
    return torch.cat(out, -1).tolist(), steps
