"""What a decode call keeps while it constrains its answers: the automaton on the model's
device, each row's entry set for the next block, and the token budget.

``device_automaton`` compiles a language for a model, ``check_budget`` checks a token
budget against it (``automaton_for`` does both, for a caller without an engine). ``ReferenceConstraint`` is the reference decoder's plain bookkeeping;
``FastConstraint`` holds the fast decoder's preallocated buffers, written in place by
steps that may be compiled or captured as CUDA graphs.
"""
from __future__ import annotations

import torch

from wamdiff2_core.decoding.constraints import sets, step
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton, LanguageError
from wamdiff2_core.decoding.constraints.compile import compile_language
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.tasks.languages import AnswerLanguage


def vocab_size(model) -> int:
    """Logits per position of ``model`` (the rows of its output layer)."""
    return model.hf.get_output_embeddings().weight.shape[0]


def device_automaton(model, language: AnswerLanguage) -> DeviceAutomaton:
    """The automaton of ``language`` over ``model``'s tokenizer, on the model's device.

    Raises:
        LanguageError: the language cannot be written with the tokenizer.
    """
    host = compile_language(language, model.processor.tokenizer, model.fields.eoa_token_id)
    return host.on_device(model.device, vocab_size(model))


def check_budget(auto: DeviceAutomaton, max_new_tokens: int) -> None:
    """LanguageError unless the shortest answer of ``auto``'s language fits in
    ``max_new_tokens`` tokens (end of answer included)."""
    if auto.min_tokens > max_new_tokens:
        raise LanguageError(f"the shortest {auto.language.name} answer takes "
                            f"{auto.min_tokens} tokens (end of answer included) but "
                            f"max_new_tokens is {max_new_tokens}")


def automaton_for(model, language: AnswerLanguage, max_new_tokens: int) -> DeviceAutomaton:
    """``device_automaton`` with its budget checked (compiled on every call).

    Raises:
        LanguageError: as ``device_automaton`` and ``check_budget``.
    """
    auto = device_automaton(model, language)
    check_budget(auto, max_new_tokens)
    return auto


def language_for(cfg: DecodeConfig, language: AnswerLanguage | None) -> AnswerLanguage | None:
    """The language a decode enforces: none when ``cfg.constrained`` is False, else the
    caller's ``language`` (None: unconstrained, unless ``cfg.constrained`` is True).

    Raises:
        ValueError: ``cfg.constrained`` True without a language to enforce.
    """
    if cfg.constrained is False:
        return None
    if language is None and cfg.constrained:
        raise ValueError("constrained decoding needs the answer's language (the task's "
                         "AnswerLanguage); none was given")
    return language


class ReferenceConstraint:
    """Per-row entry sets and the budget of one reference decode."""

    def __init__(self, auto: DeviceAutomaton, mask_id: int, eoa: int, cfg: DecodeConfig,
                 rows: int):
        self.auto, self.mask_id, self.eoa, self.cfg = auto, mask_id, eoa, cfg
        self.entry = auto.state_set(rows, auto.start)                        # (R, S)
        self.ok = None

    @classmethod
    def for_model(cls, model, auto: DeviceAutomaton, cfg: DecodeConfig, rows: int
                  ) -> "ReferenceConstraint":
        return cls(auto, model.fields.mask_token_id, model.fields.eoa_token_id, cfg, rows)

    def begin_block(self, offset: int, block: int) -> None:
        self.ok = sets.budget_ok(self.auto, offset, block, self.cfg.max_new_tokens)

    def step(self, x: torch.Tensor, logits: torch.Tensor, quota: int, last: bool,
             gen: torch.Generator | None, temperature=None) -> torch.Tensor:
        """The block after one constrained step (``temperature``: None for the config's,
        or a per-row tensor)."""
        cfg = self.cfg
        self.columns = sets.column_logits(self.auto, logits)                # (B, K, C)
        return step.reference_step(self.auto, self.entry, x, self.columns, self.mask_id,
                                   self.ok, cfg.commit_rule, quota, last, cfg.threshold,
                                   cfg.temperature if temperature is None else temperature,
                                   gen)

    def confidence(self, x: torch.Tensor) -> torch.Tensor:
        """(B, K) the model's probability, over the language's tokens, of each token of
        ``x`` in the last step's logits (0 where ``x`` holds no token of the language)."""
        return sets.token_probability(self.auto, self.columns, x)

    def end_block(self, x: torch.Tensor) -> None:
        self.entry = step.exit_set(self.auto, self.entry, x, self.mask_id, self.ok)

    def next_token(self, logits: torch.Tensor, offset: int, done: torch.Tensor,
                   gen: torch.Generator | None) -> torch.Tensor:
        """An AR decoder's next token (B, 1) at answer ``offset``: a one-position block
        (end-of-answer where ``done``), filled at once."""
        x = torch.where(done, self.eoa, self.mask_id).unsqueeze(-1)
        self.begin_block(offset, 1)
        x = self.step(x, logits, 1, True, gen)
        self.end_block(x)
        return x


class FastConstraint:
    """Device buffers of the constrained step of one fast decoder state (batch bucket
    ``rows``, block ``block``): the entry and exit sets, the block's answer offset and the
    token budget (device scalars set per block with ``fill_``), and the language columns of
    the last forward's logits (written by the captured forward)."""

    def __init__(self, auto: DeviceAutomaton, rows: int, block: int, mask_id: int,
                 eoa: int):
        dev = auto.src.device
        self.auto, self.block, self.mask_id, self.eoa = auto, block, mask_id, eoa
        self.entry = auto.state_set(rows, auto.start)                       # (Bb, S)
        self.exit = self.entry.clone()
        self.offset = torch.zeros((), dtype=torch.long, device=dev)
        self.max_new = torch.zeros((), dtype=torch.long, device=dev)
        self.col_logits = torch.zeros(rows, block, auto.n_cols, dtype=torch.float32,
                                      device=dev)                            # (Bb, K, C)

    def start(self, max_new_tokens: int, real_rows: int) -> None:
        """A new decode: every real row at the start state, padding rows DONE."""
        self.max_new.fill_(max_new_tokens)
        self.exit.zero_()
        self.exit[:real_rows, self.auto.start] = 1.0
        self.exit[real_rows:, self.auto.done] = 1.0

    def begin_block(self, offset: int) -> None:
        """The block at answer ``offset`` enters where the previous block left."""
        self.entry.copy_(self.exit)
        self.offset.fill_(offset)

    def take_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Keep the language columns of a forward's logits (R <= Bb, K, V) in the first R
        rows of the buffer; returns those rows."""
        kept = self.col_logits[:logits.shape[0]]
        kept.copy_(sets.column_logits(self.auto, logits))
        return kept

    def step(self, x: torch.Tensor, col_logits: torch.Tensor, rule: str, quota, last: bool,
             threshold, temperature: float, gen) -> None:
        """One constrained step of the first ``x.shape[0]`` rows, written into ``x``."""
        rows = x.shape[0]
        ok = sets.budget_ok(self.auto, self.offset, self.block, self.max_new)
        new, exit_set = step.fast_step(self.auto, self.entry[:rows], x, col_logits,
                                       self.mask_id, ok, rule, quota, last, threshold,
                                       temperature, gen)
        x.copy_(new)
        self.exit[:rows].copy_(exit_set)

    def next_token(self, col_logits: torch.Tensor, done: torch.Tensor,
                   offset: torch.Tensor, temperature: float, gen) -> torch.Tensor:
        """An AR decoder's next token (R, 1) at answer ``offset`` (a device scalar) for the
        first R rows: a one-position block (end-of-answer where ``done``), filled at once."""
        self.entry.copy_(self.exit)
        self.offset.copy_(offset.reshape(()))
        x = torch.where(done, self.eoa, self.mask_id).unsqueeze(-1)          # (R, 1)
        self.step(x, col_logits, "sequential", 1, True, 1.0, temperature, gen)
        return x


__all__ = ["LanguageError", "automaton_for", "check_budget", "device_automaton",
           "language_for", "ReferenceConstraint", "FastConstraint"]
