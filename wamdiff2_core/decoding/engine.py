"""The decoding engine: everything that outlives one decode call of one model, in one object.

A ``DecodingEngine`` is built by its owner (a ``Planner``, ``bench decode``, predict, the
closed loop) for one model, one backend and one ``FastConfig``, and passed explicitly; nothing
is registered or cached anywhere else. In the order it comes to exist (nano-vllm's engine ->
model runner):

1. the model, loaded by the caller (weights, processor, diffusion fields);
2. with the fast backend, the device runner (``runner.FastRunner``): the static text model
   over the model's weights, the execution mode (eager, compiled, CUDA graphs), the
   attention backend and the graph memory pool;
3. per shape (batch bucket, block size, commit rule, greedy or sampled, fused commit,
   answer language), a decoder state: the static KV cache, the input buffers and the
   compiled or captured steps, built on the first decode of that shape or up front by
   ``warmup``;
4. the answer languages' automata (``decoding.constraints``), compiled on first use.

``decode`` is the one dispatch from a caller to a decoder: it settles the commit rule
(``config.resolve_decode``), the language to enforce, then runs the backend's decoder for the
model's paradigm. States hold one call's buffers, so calls take turns on ``lock``: two
planners sharing an engine (``Planner.reconfigure`` with the same backend) decode one at a
time; nothing else is shared between them.
"""
from __future__ import annotations

import threading

from wamdiff2_core.decoding import fast, fast_ar, reference
from wamdiff2_core.decoding.config import BACKENDS, DecodeConfig, FastConfig, resolve_decode
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.constraints.session import (check_budget, device_automaton,
                                                        language_for)
from wamdiff2_core.decoding.output import DecodeOutput, DecodeStats
from wamdiff2_core.decoding.runner import FastRunner
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.tasks.languages import AnswerLanguage


class DecodingEngine:
    """Decodes answers of ``model`` with ``backend`` ("fast" or "reference"); ``fast`` sets
    how the fast decoders run (the tokens never depend on it)."""

    def __init__(self, model: Wamdiff2Model, backend: str = "fast",
                 fast: FastConfig = FastConfig()):
        if backend not in BACKENDS:
            raise ValueError(f"unknown decoder backend {backend!r}; known: "
                             f"{', '.join(BACKENDS)}")
        self.model, self.backend, self.fast = model, backend, fast
        self.runner = FastRunner(model, fast) if backend == "fast" else None
        self.automata: dict[AnswerLanguage, DeviceAutomaton] = {}
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        where = f", mode {self.runner.mode}" if self.runner else ""
        return (f"DecodingEngine({self.model.origin or 'model'}, {self.backend}"
                f"{where}, {len(self.runner.states) if self.runner else 0} states)")

    def automaton(self, language: AnswerLanguage, max_new_tokens: int) -> DeviceAutomaton:
        """The automaton of ``language`` on the model's device (compiled on first use).

        Raises:
            LanguageError: the language cannot be written with the model's tokenizer, or
                its shortest answer needs more than ``max_new_tokens`` tokens.
        """
        with self.lock:
            return self._automaton(language, max_new_tokens)

    def _automaton(self, language: AnswerLanguage, max_new_tokens: int) -> DeviceAutomaton:
        auto = self.automata.get(language)
        if auto is None:
            auto = self.automata[language] = device_automaton(self.model, language)
        check_budget(auto, max_new_tokens)
        return auto

    def decode(self, batch: dict, cfg: DecodeConfig,
               language: AnswerLanguage | None = None) -> DecodeOutput:
        """The answers of an encoded prompt batch (``processor.encode_prompts``), decoded
        with ``cfg`` resolved for this model; with ``language``, each answer is a word of
        it unless ``cfg.constrained`` is False (``constraints.session.language_for``)."""
        cfg = resolve_decode(cfg, self.model.fields)
        language = language_for(cfg, language)
        with self.lock:
            auto = self._automaton(language, cfg.max_new_tokens) if language else None
            if self.runner is None:
                return reference.decode(self.model, batch, cfg, automaton=auto)
            if self.model.fields.paradigm == "ar":
                return fast_ar.decode(self.runner, batch, cfg, auto)
            return fast.decode(self.runner, batch, cfg, auto)

    def warmup(self, batch: dict, cfg: DecodeConfig,
               language: AnswerLanguage | None = None) -> DecodeStats:
        """A throw-away decode that builds (and compiles or captures) the state that
        decodes of this batch size, ``cfg`` and ``language`` use, so the first real request
        is not slow; returns its stats."""
        return self.decode(batch, cfg, language).stats
