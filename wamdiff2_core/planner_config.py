"""How a Planner plans: one frozen ``PlannerConfig``, built once from Python, a plain mapping
(the command line's options), a YAML file or the node's parameters, and handed to
``Planner`` whole. ``dataclasses.replace`` builds the next one; ``Planner.reconfigure`` takes
it. Torch-free: the checks here need no model (the model-dependent ones are the Planner's).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from wamdiff2_core import tasks
from wamdiff2_core.candidates import CandidateConfig
from wamdiff2_core.decoding.config import (BACKENDS, DEFAULT_BACKEND, DecodeConfig,
                                          ExactConfig, FastConfig)

#: The most bytes a planner settings file may have (it holds a few dozen keys).
MAX_CONFIG_BYTES = 64 * 1024

#: The keys of ``PlannerConfig.from_mapping`` (the command line's option names, as argparse
#: stores them): key -> (the PlannerConfig field it sets, the field of that field's config
#: or None for the field itself, the value's type).
MAPPING_KEYS: dict[str, tuple[str, str | None, type]] = {
    # how every answer is decoded (DecodeConfig)
    "block_size": ("decode", "block_size", int),
    "steps_per_block": ("decode", "steps_per_block", int),
    "threshold": ("decode", "threshold", float),
    "commit_rule": ("decode", "commit_rule", str),
    "temperature": ("decode", "temperature", float),
    "max_new_tokens": ("decode", "max_new_tokens", int),
    "seed": ("decode", "seed", int),
    "constrained": ("decode", "constrained", bool),
    "decode_mode": ("decode", "mode", str),
    # planning answers only: ``decode`` with these replaced
    "plan_commit_rule": ("plan_decode", "commit_rule", str),
    "plan_steps_per_block": ("plan_decode", "steps_per_block", int),
    "plan_threshold": ("plan_decode", "threshold", float),
    # the engine
    "backend": ("backend", None, str),
    "verifier": ("verifier", None, str),
    "draft_steps": ("exact", "draft_steps", int),
    # candidate plans
    "candidates": ("candidates", "k", int),
    "scorer": ("candidates", "scorer", str),
    "diversity": ("candidates", "diversity", str),
    "candidate_temperature": ("candidates", "temperature", float),
    "scorer_weights": ("scorer_weights", None, str),
    # planning prompts and answers
    "plan_max_speed": ("plan_max_speed", None, float),
    "lateral_status": ("lateral_status", None, bool),
}


@dataclass(frozen=True)
class PlannerConfig:
    """Everything a ``Planner`` is told besides its weights.

    decode: how every answer is decoded; plan_decode: when given, replaces it for planning
        answers only (both resolved against the checkpoint by the planner: ``resolve_decode``).
    backend: the decoder backend (``decoding.config.BACKENDS``; None: the default, "fast").
    fast: how the fast decoders run (never the tokens).
    exact / verifier: exact mode's drafting and its verifier: None (the checkpoint's
        ``ar_teacher/``, else "self"), "self", a checkpoint directory or a next-token model.
    candidates: K candidate plans per frame and their scorer (k = 1: one plan);
        scorer_weights: the learned scorer's file (None: the checkpoint's).
    plan_max_speed: the planning language's speed envelope in m/s (None: none).
    lateral_status: whether planning prompts state the lateral velocity and acceleration
        (None: the model's setting).

    ``decode``, ``fast``, ``exact`` or ``candidates`` given as None is the default.
    Backend, ``fast``, ``verifier`` and ``exact`` make the ``engine_key``: two planners of
    one model whose keys are equal may share one engine."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    plan_decode: DecodeConfig | None = None
    backend: str | None = None
    fast: FastConfig = field(default_factory=FastConfig)
    exact: ExactConfig = field(default_factory=ExactConfig)
    verifier: Any = None
    candidates: CandidateConfig = field(default_factory=CandidateConfig)
    scorer_weights: str | Path | None = None
    plan_max_speed: float | None = tasks.PLAN_MAX_SPEED_MPS
    lateral_status: bool | None = None

    def __post_init__(self) -> None:
        for name, kind in (("decode", DecodeConfig), ("fast", FastConfig),
                           ("exact", ExactConfig), ("candidates", CandidateConfig)):
            if getattr(self, name) is None:          # None: the default, as left out
                object.__setattr__(self, name, kind())
            elif not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got "
                                 f"{type(getattr(self, name)).__name__}")
        if self.plan_decode is not None and not isinstance(self.plan_decode, DecodeConfig):
            raise ValueError(f"plan_decode must be a DecodeConfig or None, got "
                             f"{type(self.plan_decode).__name__}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"unknown decoder backend {self.backend!r}; known: "
                             f"{', '.join(BACKENDS)}")
        if isinstance(self.verifier, os.PathLike):   # a directory compares as its name
            object.__setattr__(self, "verifier", os.fspath(self.verifier))
        if self.verifier == "" or isinstance(self.verifier, (bool, int, float, dict, list)):
            raise ValueError(f"verifier must be None, 'self', a checkpoint directory or a "
                             f"next-token model, got {self.verifier!r}")
        if self.scorer_weights is not None and (
                not isinstance(self.scorer_weights, (str, os.PathLike))
                or os.fspath(self.scorer_weights) == ""):
            raise ValueError(f"scorer_weights must be a file name or None, got "
                             f"{self.scorer_weights!r}")
        speed = self.plan_max_speed
        if speed is not None and (isinstance(speed, bool) or not isinstance(speed, (int, float))
                                  or not speed > 0):
            raise ValueError(f"plan_max_speed must be a speed > 0 m/s or None, got {speed!r}")
        if self.lateral_status not in (None, True, False):
            raise ValueError(f"lateral_status must be None, true or false, got "
                             f"{self.lateral_status!r}")
        if self.candidates.enabled and (self.plan_decode or self.decode).mode == "exact":
            raise ValueError("candidate plans are rows sampled apart by block diffusion; exact "
                             "mode answers the verifier's one greedy plan: use one or the "
                             "other")

    def engine_key(self) -> tuple:
        """What a planner's engine is built from: (backend, fast, verifier, exact). Two
        planners of one model whose keys are equal can share one engine."""
        return self.backend or DEFAULT_BACKEND, self.fast, self.verifier, self.exact

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "PlannerConfig":
        """The config a plain mapping describes, with the keys of ``MAPPING_KEYS`` (the
        command line's option names: ``{"commit_rule": "low_confidence_leftmost",
        "candidates": 8, "scorer": "confidence", "backend": "fast"}``). A key left out or
        None keeps the default; ``plan_*`` keys set planning answers' settings (``decode``
        with those replaced); ``plan_max_speed`` 0 means no envelope. ValueError (one
        sentence naming the key) for an unknown key or a bad value."""
        try:
            return cls._build(mapping)
        except ValueError as exc:
            raise ValueError(f"planner settings: {exc}") from None

    @classmethod
    def _build(cls, mapping: Mapping[str, Any]) -> "PlannerConfig":
        if not isinstance(mapping, Mapping):
            raise ValueError(f"must be a mapping of names to values, got "
                             f"{type(mapping).__name__}")
        unknown = sorted(str(key) for key in mapping if key not in MAPPING_KEYS)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)}; known: "
                             f"{', '.join(MAPPING_KEYS)}")
        parts: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for key, value in mapping.items():
            if value is None:
                continue
            target, sub, kind = MAPPING_KEYS[key]
            value = _typed(key, value, kind)
            if sub is None:
                top[target] = value
            else:
                parts.setdefault(target, {})[sub] = value
        if top.get("plan_max_speed") == 0:
            top["plan_max_speed"] = None
        decode = DecodeConfig(**parts.get("decode", {}))
        plan = parts.get("plan_decode")
        try:
            plan = plan and replace(decode, **plan)
        except ValueError as exc:
            raise ValueError(f"planning answers: {exc}") from None
        return cls(decode=decode, plan_decode=plan, exact=ExactConfig(**parts.get("exact", {})),
                   candidates=CandidateConfig(**parts.get("candidates", {})), **top)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "PlannerConfig":
        """The config of a YAML file holding one mapping with ``from_mapping``'s keys, read
        within a user file's limits (``user_files.read_yaml``). ValueError (one sentence
        naming the file) for a file that cannot be read or holds a bad setting."""
        from wamdiff2_core.user_files import read_yaml

        doc = read_yaml(path, "the planner settings file", MAX_CONFIG_BYTES)
        if doc is None:                        # an empty file: every default
            return cls()
        try:
            return cls._build(doc)
        except ValueError as exc:
            raise ValueError(f"the planner settings file {path}: {exc}") from None


def _typed(key: str, value: Any, kind: type) -> Any:
    """``value`` as ``kind`` (an int where a float is asked); ValueError naming ``key``."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    raise ValueError(f"{key} must be {names[kind]}, got {value!r}")


__all__ = ["MAPPING_KEYS", "PlannerConfig"]
