"""A task's answer language as a token-level automaton, on the host and as device tensors.

``TokenAutomaton`` is the deterministic automaton over token ids that outlines-core builds
for a regular expression and a tokenizer (``compile.py``), extended with the answer's tail
as trained: from an accepting state the end-of-answer token leads to DONE, whose only move
is end-of-answer again (the padding to the block's end). It is trimmed to the states that
are reachable from the start and can still reach DONE, renumbered in breadth-first order,
and carries ``dist[s]``: the fewest tokens from ``s`` to DONE.

``DeviceAutomaton`` holds it as tensors for the constrained step (``sets.py``): the moves as
an edge list (``src``, ``col``, ``dst``), ``col`` indexing the tokens the language uses
(``col_tok``: column -> vocabulary id; ``tok_col``: vocabulary id -> column or -1).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from wamdiff2_core.tasks.languages import AnswerLanguage


class LanguageError(ValueError):
    """A language that cannot be decoded as asked; the message is one clear sentence."""


@dataclass
class TokenAutomaton:
    """The trimmed token automaton of one language over one tokenizer (host side).

    ``edges`` are (src, token id, dst) triples, deterministic per (src, token);
    ``dist[s]`` is the fewest tokens from ``s`` to DONE (end-of-answer included)."""
    language: AnswerLanguage
    n_states: int
    start: int
    done: int
    eoa: int
    edges: list[tuple[int, int, int]]
    dist: list[int]
    _device: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, language: AnswerLanguage, start, finals, transitions: dict,
              eoa: int) -> "TokenAutomaton":
        """From a raw automaton: ``transitions[state][token] = next``, ``finals`` the
        accepting states. End-of-answer moves in ``transitions`` are ignored (the tail is
        added here); states that cannot finish are dropped."""
        done = object()
        moves: dict = {s: {t: n for t, n in ts.items() if t != eoa}
                       for s, ts in transitions.items()}
        for s in finals:
            moves.setdefault(s, {})[eoa] = done
        moves[done] = {eoa: done}
        # fewest tokens to DONE: breadth-first over the reversed moves
        back: dict = {}
        for s, ts in moves.items():
            for n in ts.values():
                back.setdefault(n, set()).add(s)
        dist = {done: 0}
        queue = deque([done])
        while queue:
            n = queue.popleft()
            for s in back.get(n, ()):
                if s not in dist:
                    dist[s] = dist[n] + 1
                    queue.append(s)
        if start not in dist:
            raise LanguageError(f"language {language.name!r} has no word this tokenizer can "
                                "write")
        # renumber the live states breadth-first from the start
        order, seen = [start], {start}
        for s in order:
            for t in sorted(moves.get(s, {})):
                n = moves[s][t]
                if n in dist and n not in seen:
                    seen.add(n)
                    order.append(n)
        num = {s: i for i, s in enumerate(order)}
        edges = [(num[s], t, num[n]) for s in order for t, n in sorted(moves.get(s, {}).items())
                 if n in num]
        return cls(language, len(order), 0, num[done], eoa, edges, [dist[s] for s in order])

    @property
    def tokens(self) -> list[int]:
        """The vocabulary ids the language uses, sorted (the device columns)."""
        return sorted({t for _, t, _ in self.edges})

    @property
    def min_tokens(self) -> int:
        """Tokens of the shortest answer, its end-of-answer included."""
        return self.dist[self.start]

    def walk(self, ids) -> int | None:
        """The state after ``ids`` from the start, or None where they leave the language."""
        table = {(s, t): n for s, t, n in self.edges}
        s = self.start
        for t in ids:
            s = table.get((s, int(t)))
            if s is None:
                return None
        return s

    def on_device(self, device: torch.device | str, vocab_size: int) -> "DeviceAutomaton":
        """The device tensors (built once per device and vocabulary size)."""
        key = (str(torch.device(device)), vocab_size)
        if key not in self._device:
            self._device[key] = DeviceAutomaton.from_host(self, device, vocab_size)
        return self._device[key]


@dataclass
class DeviceAutomaton:
    """The automaton as device tensors (E edges, S states, C = columns = tokens used)."""
    language: AnswerLanguage
    n_states: int
    n_cols: int
    start: int
    done: int
    min_tokens: int
    src: torch.Tensor          # (E,) long
    col: torch.Tensor          # (E,) long, column of the edge's token
    dst: torch.Tensor          # (E,) long
    dist: torch.Tensor         # (S,) long
    col_tok: torch.Tensor      # (C,) long vocabulary id of each column
    tok_col: torch.Tensor      # (V,) long column of each vocabulary id, -1 if unused
    both_gather: torch.Tensor = None   # (2E,) src, then dst + S: forward beside backward
    both_scatter: torch.Tensor = None  # (2E,) dst, then src + S

    def __post_init__(self):
        s = self.n_states
        self.both_gather = torch.cat([self.src, self.dst + s])
        self.both_scatter = torch.cat([self.dst, self.src + s])

    @classmethod
    def from_host(cls, auto: TokenAutomaton, device, vocab_size: int) -> "DeviceAutomaton":
        tokens = auto.tokens
        if tokens and tokens[-1] >= vocab_size:
            raise LanguageError(f"language {auto.language.name!r} uses token {tokens[-1]}, "
                                f"beyond the model's {vocab_size} logits")
        long = dict(dtype=torch.long, device=device)
        col_of = {t: i for i, t in enumerate(tokens)}
        tok_col = torch.full((vocab_size,), -1, **long)
        tok_col[torch.tensor(tokens, **long)] = torch.arange(len(tokens), **long)
        src, tok, dst = zip(*auto.edges)
        return cls(auto.language, auto.n_states, len(tokens), auto.start, auto.done,
                   auto.min_tokens, torch.tensor(src, **long),
                   torch.tensor([col_of[t] for t in tok], **long), torch.tensor(dst, **long),
                   torch.tensor(auto.dist, **long), torch.tensor(tokens, **long), tok_col)

    def state_set(self, rows: int, state: int) -> torch.Tensor:
        """(rows, S) 0/1 sets holding ``state`` only."""
        out = torch.zeros(rows, self.n_states, dtype=torch.float32, device=self.src.device)
        out[:, state] = 1.0
        return out
