"""The decoding engine: everything that outlives one decode call of one model, in one object.

A ``DecodingEngine`` is built by its owner (a ``Planner``, ``bench decode``, predict, the
closed loop) for one model, one backend and one ``FastConfig``, and passed explicitly; nothing
is registered or cached anywhere else. In the order it comes to exist (nano-vllm's engine ->
model runner):

1. the model, loaded by the caller (weights, processor, diffusion fields);
2. with the fast backend, one device runner (``runner.FastRunner``) per model it decodes
   with (the model's; in exact mode the verifier's too): the static text model over that
   model's weights, the execution mode (eager, compiled, CUDA graphs), the attention
   backend, the graph memory pool and that model's decoder states;
3. per shape (batch bucket, block size, commit rule, greedy or sampled, fused commit,
   answer language), a decoder state in each runner that decodes it: the static KV cache,
   the input buffers and the compiled or captured steps, built on the first decode of that
   shape or up front by ``warmup`` (exact mode: the drafter's state in the model's runner,
   the verify state in the verifier's);
4. the answer languages' automata (``decoding.constraints``), compiled on first use.

``decode`` is the one dispatch from a caller to a decoder: it settles the commit rule
(``config.resolve_decode``), the language to enforce, then runs the backend's decoder for the
model's paradigm. States hold one call's buffers, so calls take turns on ``lock``: two
planners sharing an engine (``Planner.reconfigure`` to a config of the same
``PlannerConfig.engine_key``: backend, fast, verifier, exact) decode one at a time; nothing else is shared between them.

Nothing outside ``decoding`` reads a runner or a state: callers read what the engine runs
with from its properties (``mode``, ``attention``, ``device``, ...), and the benchmarks time
single steps of its states through ``step_probes``.
"""
from __future__ import annotations

import threading
from typing import Sequence

import torch

from wamdiff2_core.decoding import exact, fast, fast_ar, fast_exact, reference
from wamdiff2_core.decoding.config import (BACKENDS, DecodeConfig, ExactConfig, FastConfig,
                                          resolve_decode)
from wamdiff2_core.decoding.constraints.automaton import DeviceAutomaton
from wamdiff2_core.decoding.constraints.session import (check_budget, device_automaton,
                                                        language_for)
from wamdiff2_core.decoding.copies import repeat_batch
from wamdiff2_core.decoding.output import DecodeOutput, DecodeStats
from wamdiff2_core.decoding.runner import FastRunner, sync
from wamdiff2_core.decoding.verify import check_verifier, load_verifier
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.tasks.languages import AnswerLanguage


class DecodingEngine:
    """Decodes answers of ``model`` with ``backend`` ("fast" or "reference"); ``fast`` sets
    how the fast decoders run (the tokens never depend on it).

    Exact mode (``DecodeConfig.mode == "exact"``) returns ``verifier``'s greedy answers:
    a next-token ``Wamdiff2Model``, a checkpoint directory, ``"self"`` (the model's own
    weights read next-token) or None: the AR teacher the model's checkpoint ships in
    ``ar_teacher/``, else ``"self"``. It is loaded and checked on the first exact decode (or
    by ``exact_verifier``), and with the fast backend gets a runner of its own. ``exact``
    sets how exact mode drafts and verifies (never the answers)."""

    def __init__(self, model: Wamdiff2Model, backend: str = "fast",
                 fast: FastConfig = FastConfig(), verifier=None,
                 exact: ExactConfig = ExactConfig()):
        if backend not in BACKENDS:
            raise ValueError(f"unknown decoder backend {backend!r}; known: "
                             f"{', '.join(BACKENDS)}")
        self.model, self.backend, self.fast, self.exact = model, backend, fast, exact
        self.runner = FastRunner(model, fast) if backend == "fast" else None
        self.automata: dict[AnswerLanguage, DeviceAutomaton] = {}
        self.lock = threading.Lock()
        self.verifier_spec = verifier           # as given; ``exact_verifier()`` loads it
        self._verifier: Wamdiff2Model | None = None
        # exact mode's verifier decodes with a runner of its own (its cache, its steps)
        self.verifier_runner: FastRunner | None = None

    @property
    def settings_key(self) -> tuple:
        """What this engine was built from: (backend, fast, verifier as given, exact), the
        form of ``PlannerConfig.engine_key``: planners whose key equals it may share it."""
        return self.backend, self.fast, self.verifier_spec, self.exact

    def __repr__(self) -> str:
        where = f", mode {self.runner.mode}" if self.runner else ""
        return (f"DecodingEngine({self.model.origin or 'model'}, {self.backend}"
                f"{where}, {len(self.runner.states) if self.runner else 0} states)")

    # ------------------------------------------------------------------ what it runs with
    @property
    def device(self) -> torch.device:
        """The device the engine decodes on (the model's)."""
        return self.runner.device if self.runner else self.model.device

    @property
    def mode(self) -> str | None:
        """The fast decoders' resolved execution mode (``graphs.resolve_mode``); None with
        the reference backend."""
        return self.runner.mode if self.runner else None

    @property
    def attention(self) -> str | None:
        """The fast decoders' attention backend as resolved (SDPA once FlashInfer, only
        preferred, failed to build a state); None with the reference backend."""
        return self.runner.attention if self.runner else None

    @property
    def sync_every(self) -> int | None:
        """Steps between the fast decoders' done-checks; None with the reference backend."""
        return self.runner.sync_every if self.runner else None

    @property
    def dtype(self) -> torch.dtype | None:
        """The fast decoders' compute dtype (the weights'); None with the reference
        backend."""
        return self.runner.text.dtype if self.runner else None

    def sync(self) -> None:
        """Wait for the device work queued so far (timers only: ``step_probes``)."""
        sync(self.device)

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
               language: AnswerLanguage | None = None,
               temperatures: Sequence[float] | None = None) -> DecodeOutput:
        """The answers of an encoded prompt batch (``processor.encode_prompts``), decoded
        with ``cfg`` resolved for this model; with ``language``, each answer is a word of
        it unless ``cfg.constrained`` is False (``constraints.session.language_for``).

        ``temperatures`` (block diffusion, not exact mode): one per row, replacing
        ``cfg.temperature`` (0: that row greedy, as a greedy decode answers it); for a batch
        of one prompt, ``len(temperatures)`` rows of it (K candidate plans), whose prompt
        the fast decoder prefills once. ValueError for another count of rows or mode."""
        cfg = resolve_decode(cfg, self.model.fields)
        language = language_for(cfg, language)
        if temperatures is not None:
            temperatures = self._check_rows(batch, cfg, temperatures)
        with self.lock:
            auto = self._automaton(language, cfg.max_new_tokens) if language else None
            if cfg.mode == "exact":
                return self._exact_decode(batch, cfg, auto)
            if self.runner is None:
                if temperatures is not None and batch["input_ids"].shape[0] == 1:
                    batch = repeat_batch(batch, len(temperatures))
                return reference.decode(self.model, batch, cfg, automaton=auto,
                                        temperatures=temperatures)
            if self.model.fields.paradigm == "ar":
                return fast_ar.decode(self.runner, batch, cfg, auto)
            return fast.decode(self.runner, batch, cfg, auto, temperatures)

    def _check_rows(self, batch: dict, cfg: DecodeConfig, temperatures: Sequence[float]
                    ) -> list[float]:
        """``temperatures`` as floats; ValueError where a temperature per row cannot be."""
        prompts = batch["input_ids"].shape[0]
        if len(temperatures) != prompts and prompts != 1:
            raise ValueError(f"{len(temperatures)} temperatures for a batch of {prompts} "
                             f"prompts: give one per prompt, or one prompt to copy")
        if cfg.mode == "exact" or self.model.fields.paradigm != "diffusion":
            raise ValueError("a temperature per row needs block-diffusion decoding (not exact "
                             "mode, not a next-token model)")
        return [float(t) for t in temperatures]

    def exact_verifier(self) -> Wamdiff2Model:
        """The verifier of exact mode, loaded and checked on first use.

        Raises:
            CheckpointError: its directory is not a loadable checkpoint.
            ValueError: the model is not a diffusion model, or the verifier is not a
                next-token model sharing its tokenizer.
        """
        with self.lock:
            return self._exact_verifier()

    def _exact_verifier(self) -> Wamdiff2Model:
        if self._verifier is None:
            if self.model.fields.paradigm != "diffusion":
                raise ValueError(f"exact mode drafts with a diffusion model; "
                                 f"{self.model.origin or 'this model'} is a next-token model")
            spec = self.verifier_spec
            if isinstance(spec, Wamdiff2Model):
                check_verifier(self.model, spec)
                self._verifier = spec
            else:
                self._verifier = load_verifier(self.model, spec)
        return self._verifier

    def _exact_decode(self, batch: dict, cfg: DecodeConfig,
                      auto: DeviceAutomaton | None) -> DecodeOutput:
        verifier = self._exact_verifier()
        if self.runner is None:
            return exact.exact_decode(self.model, verifier, batch, cfg, self.exact, auto)
        if self.verifier_runner is None:
            self.verifier_runner = FastRunner(verifier, self.fast)
        return fast_exact.fast_exact_decode(self.runner, self.verifier_runner, batch, cfg,
                                            self.exact, auto)

    def warmup(self, batch: dict, cfg: DecodeConfig,
               language: AnswerLanguage | None = None) -> DecodeStats:
        """A throw-away decode that builds (and compiles or captures) the state that
        decodes of this batch size, ``cfg`` and ``language`` use, so the first real request
        is not slow; returns its stats."""
        return self.decode(batch, cfg, language).stats
