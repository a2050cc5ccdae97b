"""The public entry: ``Planner.from_pretrained(...).plan(observation)``.

The planner never sees a ROS message: observations are plain images and numbers, results are
numpy arrays and text. A malformed model answer raises ``AnswerParseError`` (with the raw text)
so callers decide on the fallback.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import torch

from wamdiff2_core import tasks
from wamdiff2_core.candidates import CandidateSet, ScoringContext
from wamdiff2_core.candidates.decode import Decoded
from wamdiff2_core.candidates.picker import CandidatePicker, checkpoint_weights
from wamdiff2_core.decoding.cancel import CancelFlag, DecodeCancelled, cancel_scope
from wamdiff2_core.decoding.config import DecodeConfig, resolve_decode
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.output import DecodeStats
from wamdiff2_core.devices import check_device
from wamdiff2_core.model.fields import check_overrides
from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model
from wamdiff2_core.model.presets import PRESETS, is_preset
from wamdiff2_core.model.processor import to_pil
from wamdiff2_core.planner_config import PlannerConfig
from wamdiff2_core.types import (BUNDLED, AnswerResult, DetectResult, Observation, PlanResult,
                                 PromptTooLong, bundled_checkpoint_path)

__all__ = ["AnswerResult", "DecodeCancelled", "DetectResult", "GeneratedRow", "Observation",
           "PlanResult", "Planner", "PlannerConfig", "PromptTooLong", "bundled_checkpoint_path",
           "load_model", "resolve_dtype"]

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}

#: The least answer budget of a detection answer: 10 boxes of the bundled tokenizer (~32
#: tokens each; the simulator's frames show up to 9 boxes), while plans need ~90 tokens.
DETECTION_MAX_NEW_TOKENS = 320


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}") from None


def load_model(path_or_preset: str | Path | None, device: str = "cpu",
               dtype: str | torch.dtype | None = None, seed: int = 0,
               fields: Mapping[str, Any] | None = None) -> Wamdiff2Model:
    """A model from a checkpoint directory, a preset name, or (None) the bundled default.

    ``fields`` overrides diffusion fields by name, e.g. ``{"mask_token_id": 151671,
    "block_size": 32}`` (keys: paradigm, block_size, mask_token_id, eoa_token_id,
    pad_token_id); the others come from the checkpoint (docs/model.md, "Loading")."""
    check_device(device)               # ValueError before anything is read or built
    dt = resolve_dtype(dtype)
    overrides = check_overrides(fields)
    if path_or_preset is None:
        path_or_preset = bundled_checkpoint_path()
        if path_or_preset is None:
            raise CheckpointError("this checkout has no bundled model "
                                  f"({BUNDLED} is missing); pass a checkpoint or a preset")
    name = str(path_or_preset)
    if is_preset(name):
        model = Wamdiff2Model.from_preset(name, seed=seed, device=device,
                                          dtype=dt or torch.float32)
        return model.with_fields(source="override", **overrides) if overrides else model
    if not Path(name).exists() and "/" not in name and "\\" not in name:
        raise CheckpointError(f"{name!r} is neither a checkpoint directory nor a preset "
                              f"(presets: {', '.join(sorted(PRESETS))})")
    return Wamdiff2Model.from_pretrained(name, device=device, dtype=dt, fields=overrides)


class GeneratedRow(NamedTuple):
    """One answer of ``Planner.generate_rows``."""

    text: str
    tokens: int                 # answer tokens, end-of-answer included
    finished: bool              # the answer ended within the token budget


class Planner:
    """Plans, detects and answers from camera images with one Wamdiff2 model, as its
    ``config`` (``PlannerConfig``, kept as given) says.

    ``config.decode`` sets how every answer is decoded; ``config.plan_decode``, when given,
    replaces it for planning answers only (e.g. the fast planning rule,
    ``low_confidence_leftmost`` with 8 steps per block, while questions keep the default
    rule: docs/decoding.md).

    Both are resolved once, here, by ``decoding.config.resolve_decode``: where one sets no
    commit rule, threshold or step budget (all None), the checkpoint's recommended rule and
    threshold apply (``model.fields.decode_commit_rule``; the bundled model: the frontier
    rule at 0.95); a rule the caller names is kept, even the default one. ``decode`` and
    ``plan_decode`` hold the resolved settings, what this planner decodes questions and
    plans with (``plan_decode`` is ``decode`` when none was given; ``decode_summary()`` says
    both in one line).

    The planner owns its ``engine`` (``decoding.engine.DecodingEngine``: the fast decoder's
    states, compiled steps and the answer languages' automata), built from the config's
    ``engine_key`` (backend, ``fast``, verifier, ``exact``) unless one is given, which must
    hold this model and match that key (ValueError otherwise).

    Each task names its answer's language to the decoder (``tasks.languages``), so with
    ``DecodeConfig.constrained`` left at None plans and detections are constrained to
    their exact formats and always have the writer's syntax, questions with a closed
    answer set (``answer(..., choices=...)``) take one of the choices, and free-text
    answers are left free; ``constrained=False`` turns it off, True also keeps free-text
    answers non-blank.

    ``config.plan_max_speed`` (m/s) is the speed of the planning language's kinematic
    envelope (``tasks.languages.PLAN_MAX_SPEED_MPS``, 40: no waypoint farther from the ego
    than that speed allows, docs/decoding.md); None: the parser's whole range (|v| <= 1000
    m).

    ``config.lateral_status``: whether planning prompts state the ego's lateral velocity and
    acceleration; None (the default) takes the model's setting
    (``model.fields.lateral_status``: False for a model trained without them, which then
    reads them as 0.00, as in its training); ``lateral_status`` holds the outcome.

    ``config.candidates`` (``candidates.CandidateConfig``): with ``k`` > 1 a plan is the
    choice of ``k`` candidates decoded in one batch (``plan_candidates``;
    docs/candidates.md), made by the scorer it names (the learned one reads
    ``config.scorer_weights``, by default the checkpoint's ``candidate_scorer.json``);
    ``k`` = 1, the default, plans as without candidates. A scorer that cannot be built is a
    CandidateConfigError (a ValueError).

    ``config.verifier`` and ``config.exact`` set exact mode (``DecodeConfig.mode ==
    "exact"``: the answers are the verifier's greedy answers; docs/decoding.md, "Exact
    mode"): the verifier is a next-token model, a checkpoint directory, ``"self"`` or None
    (the checkpoint's ``ar_teacher/``, else ``"self"``), loaded when a setting first needs
    it, and ``exact`` (``ExactConfig``) how it drafts and verifies."""

    def __init__(self, model: Wamdiff2Model, config: PlannerConfig = PlannerConfig(), *,
                 engine: DecodingEngine | None = None):
        if not isinstance(config, PlannerConfig):
            raise ValueError(f"a Planner takes a PlannerConfig, got {type(config).__name__}")
        backend, fast, verifier, exact = config.engine_key()
        if engine is None:                       # ValueError naming the known backends
            engine = DecodingEngine(model, backend, fast, verifier=verifier, exact=exact)
        elif engine.model is not model or engine.settings_key != config.engine_key():
            raise ValueError("an engine given to a Planner must hold its model and the "
                             "config's backend, fast, verifier and exact-mode settings")
        self.model, self.engine, self.config = model, engine, config
        self.decode = self._resolve(config.decode)
        self.plan_decode = (self._resolve(config.plan_decode) if config.plan_decode
                            else self.decode)
        self.plan_max_speed = config.plan_max_speed
        self.lateral_status = (model.fields.lateral_status if config.lateral_status is None
                               else config.lateral_status)
        self.plan_language = tasks.planning_language(config.plan_max_speed)
        if self.plan_decode.constrained is not False:   # LanguageError up front: a plan
            engine.automaton(self.plan_language,        # needs the budget of one
                             self.plan_decode.max_new_tokens)
        if "exact" in (self.decode.mode, self.plan_decode.mode):   # the verifier up front:
            engine.exact_verifier()     # ValueError / CheckpointError at load, not at a plan
        self.candidates = config.candidates
        self.picker = CandidatePicker(self.candidates, config.scorer_weights or
                                      checkpoint_weights(model.origin or None)) \
            if self.candidates.enabled else None

    @classmethod
    def from_pretrained(cls, path_or_preset: str | Path | None = None,
                        config: PlannerConfig = PlannerConfig(), *, device: str = "cpu",
                        dtype: str | torch.dtype | None = None,
                        fields: Mapping[str, Any] | None = None) -> "Planner":
        """Load a checkpoint directory, build a preset, or (None) load the bundled model,
        and plan with ``config``. ``fields``: diffusion fields the checkpoint does not
        state, or that replace its own (``load_model``); ``planner.model.describe()`` says
        where each one came from."""
        return cls(load_model(path_or_preset, device, dtype, fields=fields), config)

    @property
    def backend(self) -> str:
        """The decoder backend ("fast" or "reference"): the engine's."""
        return self.engine.backend

    def reconfigure(self, config: PlannerConfig) -> "Planner":
        """A new planner of these weights with ``config`` (build it with
        ``dataclasses.replace(planner.config, ...)``).

        Where ``config.engine_key()`` equals this planner's (the same backend, ``fast``,
        verifier and ``exact`` settings) the new planner shares this one's engine
        (``new.engine is self.engine``: compiled states, automata and a loaded verifier are
        reused; the two take turns on ``engine.lock``); otherwise it builds its own."""
        same = config.engine_key() == self.engine.settings_key
        return type(self)(self.model, config, engine=self.engine if same else None)

    @property
    def verifier_name(self) -> str | None:
        """Exact mode's verifier, as a name: its checkpoint's directory, or "self"; None
        when this planner decodes no answer in exact mode."""
        if "exact" not in (self.decode.mode, self.plan_decode.mode):
            return None
        return self.engine.exact_verifier().origin or "self"

    def _resolve(self, decode: DecodeConfig) -> DecodeConfig:
        try:
            return resolve_decode(decode, self.model.fields)
        except ValueError as exc:
            raise CheckpointError(f"{self.model.origin or 'the model'}: {exc}") from None

    def decode_summary(self) -> str:
        """How this planner decodes, in one line (for logs and diagnostics)."""
        text = self.decode.summary()
        if self.plan_decode != self.decode:
            text += f"; planning answers: {self.plan_decode.summary()}"
        return f"{text} ({self.engine.backend} decoder)"

    # ------------------------------------------------------------------ cameras
    @property
    def cameras(self) -> tuple[str, ...]:
        """The cameras the model was trained with (``model.fields.cameras``): every request
        holds one image per camera, in this order; the prompts name them."""
        return self.model.fields.cameras

    def check_images(self, images: Sequence) -> None:
        """ValueError (one sentence) unless ``images`` holds one image per camera."""
        if len(images) != len(self.cameras):
            raise ValueError(f"the model reads {len(self.cameras)} camera image(s) per "
                             f"request ({', '.join(self.cameras)}), got {len(images)}")

    # ------------------------------------------------------------------ limits
    @property
    def max_positions(self) -> int:
        """The model's position budget: prompt plus answer tokens must fit in it."""
        return int(self.model.hf.config.get_text_config().max_position_embeddings)

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is on its own (no chat format, no image tokens)."""
        return len(self.model.processor.encode_text(text))

    def prompt_length(self, prompt: str, image_sizes: Sequence[tuple[int, int]]) -> int:
        """How many tokens ``prompt`` is with images of these (width, height) sizes, chat
        format and image tokens included, as an encoded batch holds it: computed from the
        sizes alone (no image is decoded)."""
        processor = self.model.processor
        merge = processor.config.merge_size ** 2
        n_image = [processor.image_processor.get_number_of_image_patches(h, w) // merge
                   for w, h in image_sizes]
        return len(processor.prompt_ids(prompt, n_image))

    def answer_positions(self, decode: DecodeConfig | None = None) -> int:
        """Positions an answer decoded with ``decode`` (default: ``decode``) may take:
        ``max_new_tokens`` rounded up to whole blocks."""
        decode = decode or self.decode
        block = decode.block_size or self.model.fields.block_size or 1
        return -(-decode.max_new_tokens // block) * block

    # ------------------------------------------------------------------ core
    def generate(self, prompts: Sequence[str], images: Sequence[list],
                 decode: DecodeConfig | None = None,
                 language: tasks.AnswerLanguage | None = None
                 ) -> tuple[list[str], DecodeStats]:
        """Raw answer texts for a batch of prompts (one image list per prompt), decoded with
        ``decode`` (default: the planner's ``decode``); ``language``: the answers' language
        (enforced unless ``decode.constrained`` is False). Raises PromptTooLong, before any
        forward, when a prompt and ``max_new_tokens`` do not fit in the model's positions."""
        rows, stats = self.generate_rows(prompts, images, decode, language)
        return [row.text for row in rows], stats

    def generate_rows(self, prompts: Sequence[str], images: Sequence[list],
                      decode: DecodeConfig | None = None,
                      language: tasks.AnswerLanguage | None = None
                      ) -> tuple[list[GeneratedRow], DecodeStats]:
        """``generate``'s answers, each with its token count and whether it ended within
        the budget (a row that did not is cut off there), and the batch's stats."""
        decode = decode or self.decode
        out = self.engine.decode(self._encode(prompts, images, decode), decode, language)
        rows = [GeneratedRow(self.model.processor.decode_answer(seq), len(seq) + int(done),
                             bool(done)) for seq, done in zip(out.sequences, out.finished)]
        return rows, out.stats

    def _encode(self, prompts: Sequence[str], images: Sequence[list],
                decode: DecodeConfig) -> dict:
        """The encoded batch; PromptTooLong when a prompt and the answer budget do not fit."""
        batch = self.model.processor.encode_prompts(list(prompts), [list(i) for i in images])
        prompt_tokens = int(batch["input_ids"].shape[1])               # (B, P) left-padded
        answer_tokens = self.answer_positions(decode)
        if prompt_tokens + answer_tokens > self.max_positions:
            raise PromptTooLong(prompt_tokens, answer_tokens, self.max_positions)
        return batch

    def plan_batch(self, observations: Sequence[Observation]
                   ) -> list[PlanResult | tasks.AnswerParseError]:
        """Plans for several observations in one batch; a malformed answer is returned as its
        AnswerParseError in that slot, so one bad row does not hide the others. Every result,
        and every such error as its ``stats`` attribute, carries the batch's DecodeStats
        (a malformed answer cost a decode too)."""
        for observation in observations:
            self.check_images(observation.images)
        prompts = [self.planning_prompt(o) for o in observations]
        texts, stats = self.generate(prompts, [o.images for o in observations],
                                     self.plan_decode, self.plan_language)
        results = []
        for text in texts:
            try:
                results.append(PlanResult(tasks.parse_waypoints(text), text, stats))
            except tasks.AnswerParseError as exc:
                exc.stats = stats
                results.append(exc)
        return results

    def planning_prompt(self, observation: Observation) -> str:
        """The planning prompt this planner writes for an observation (the lateral velocity
        and acceleration as 0.00 when ``lateral_status`` is False)."""
        velocity, acceleration = observation.velocity, observation.acceleration
        if not self.lateral_status:
            velocity, acceleration = (velocity[0], 0.0), (acceleration[0], 0.0)
        return tasks.planning_prompt(observation.command, velocity, acceleration,
                                     observation.position, cameras=self.cameras)

    def plan(self, observation: Observation, cancel: CancelFlag | None = None) -> PlanResult:
        """Eight waypoints for one observation (with K > 1 candidates: the chosen one, the
        set in ``PlanResult.candidates``); raises AnswerParseError on a malformed answer.
        ``cancel`` (e.g. a threading.Event): once set, the decode stops before its next
        forward pass and raises DecodeCancelled (``decoding.cancel``)."""
        with cancel_scope(cancel):
            return self._plan(observation)

    def _plan(self, observation: Observation) -> PlanResult:
        if observation.command not in tasks.COMMANDS:
            raise ValueError(f"unknown command {observation.command!r}; "
                             f"expected one of {tasks.COMMANDS}")
        if self.picker is not None:
            cset = self.plan_candidates(observation)
            chosen = cset.chosen
            if not chosen.valid:
                exc = tasks.AnswerParseError("planning", chosen.text, chosen.error)
                exc.stats = cset.stats
                raise exc
            return PlanResult(chosen.waypoints, chosen.text, cset.stats, cset)
        result = self.plan_batch([observation])[0]
        if isinstance(result, tasks.AnswerParseError):
            raise result
        return result

    def plan_candidates(self, observation: Observation) -> CandidateSet:
        """The ``candidates.k`` candidate plans of one observation from one batched decode
        (row 0: the greedy plan, the plan without candidates) and the scorer's selection,
        made with what the observation holds and the model's answers only. ValueError when
        this planner decodes one plan (``candidates.k`` 1)."""
        if self.picker is None:
            raise ValueError("this planner decodes one plan per frame (candidates k = 1)")
        self.check_images(observation.images)
        context = ScoringContext(observation.command, tuple(observation.velocity),
                                 tuple(observation.acceleration))
        seed = self.candidates.frame_seed(observation.stamp)    # each frame its own noise
        return self.picker.pick(lambda *rows: self._decode_rows(*rows, seed=seed),
                                lambda c: self.planning_prompt(replace(observation, command=c)),
                                list(observation.images), context)

    def _decode_rows(self, prompts: list[str], images: list[list], temperatures: list[float],
                     seed: int) -> Decoded:
        """Planning answers of one batch, row i at ``temperatures[i]`` drawing from ``seed``:
        texts, per-token confidences, statistics. Rows of one prompt are that prompt
        prefilled once."""
        decode = replace(self.plan_decode, seed=seed)
        if len(set(prompts)) == 1:
            prompts, images = prompts[:1], images[:1]
        out = self.engine.decode(self._encode(prompts, images, decode), decode,
                                 self.plan_language, temperatures)
        texts = [self.model.processor.decode_answer(s) for s in out.sequences]
        return texts, out.confidences or [()] * len(texts), out.stats

    @property
    def detection_decode(self) -> DecodeConfig:
        """The settings detection answers are decoded with: ``decode`` with an answer budget
        of at least ``DETECTION_MAX_NEW_TOKENS`` (a box costs ~32 tokens)."""
        budget = max(self.decode.max_new_tokens, DETECTION_MAX_NEW_TOKENS)
        return replace(self.decode, max_new_tokens=budget)

    def detect(self, images: list, cancel: CancelFlag | None = None) -> DetectResult:
        """2-D boxes (pixels of the first image) of the objects the model sees; a box with
        its corners out of order is left out and counted in ``dropped``. ``cancel``: as
        ``plan``'s."""
        self.check_images(images)
        width, height = to_pil(images[0]).size
        with cancel_scope(cancel):
            texts, stats = self.generate([tasks.detection_prompt(self.cameras)], [images],
                                         self.detection_decode, tasks.detection_language())
        detections, dropped = tasks.parse_model_detections(texts[0], width, height)
        return DetectResult(detections, texts[0], stats, dropped)

    def answer(self, images: list, question: str,
               choices: Sequence[str] | None = None,
               cancel: CancelFlag | None = None) -> AnswerResult:
        """An answer to a question about the images: free text, or (``choices``) one of a
        closed set of answers (e.g. a simulator question template's answer set).
        ``cancel``: as ``plan``'s."""
        self.check_images(images)
        language = tasks.qa_language(choices) if choices is not None else \
            tasks.qa_language() if self.decode.constrained else None
        prompt = tasks.qa_prompt(question, cameras=self.cameras)
        with cancel_scope(cancel):
            texts, stats = self.generate([prompt], [images], language=language)
        return AnswerResult(tasks.parse_answer(texts[0]), stats)

    def warmup(self, width: int = 320, height: int = 180) -> DecodeStats:
        """Throw-away decodes on a blank image, so that the engine has built (compiled,
        captured) the states the first real requests use: a plan (and with K > 1 the
        candidate batch), and a question when questions are decoded with other settings.
        Returns the plan's stats."""
        blanks = [np.zeros((height, width, 3), np.uint8)] * len(self.cameras)
        processor = self.model.processor
        plan = processor.encode_prompts(
            [tasks.planning_prompt("straight", cameras=self.cameras)], [blanks])
        stats = self.engine.warmup(plan, self.plan_decode, self.plan_language)
        if self.picker is not None:                  # the candidate batch's shapes too
            self.plan_candidates(Observation(images=blanks, command="straight"))
        if self.plan_decode != self.decode:
            ask = tasks.qa_prompt("Is the road clear?", cameras=self.cameras)
            question = processor.encode_prompts([ask], [blanks])
            self.engine.warmup(question, self.decode)
        return stats
