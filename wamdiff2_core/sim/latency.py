"""How long a plan takes in simulated time: latency models for the closed loop.

Under ``--time latency-model`` the world does not wait for the planner's wall-clock time
but for a modelled one: a latency model turns one plan's decoding statistics
(``DecodeStats``) into the seconds of simulated time between the camera frame and the
plan's arrival. Models by name (``parse_latency_model``):

- ``zero``: no time at all (the synchronous closed loop: the world waits for every plan);
- ``fixed:MS``: every plan takes MS milliseconds;
- ``profile:PATH[@MODE]``: a measured per-forward profile, the JSON report of ``wamdiff2
  bench decode`` (``scripts/gpu_check.sh`` writes them, e.g. docs/gpu/bench_2b_sdpa_h200.json).
  MODE names one of its ``latency_ms`` entries (default ``graphs``). A plan costs the
  prefill (the mean over the report's AR and fast-diffusion decoders: the same prompt)
  plus, for a block-diffusion decode, ``block_step`` per denoising forward and ``commit``
  per commit pass, or, for an autoregressive decode (every block one token), ``ar_step``
  per forward;
- ``h200``: ``profile:docs/gpu/bench_2b_sdpa_h200.json@graphs``, the Qwen3-VL 2B shape on
  one NVIDIA H200 in CUDA graphs (bf16, batch 1, block 32; measured 2026-11-29).
- a ``:ar`` suffix (``h200:ar``, ``profile:PATH@MODE:ar``) prices every decode as if it were
  autoregressive: the prefill plus one ``ar_step`` per answer token. The same plans at an
  AR decoder's speed: what the planner's answers would be worth if they came as slowly as
  its AR teacher's.

A profile prices the *forwards the planner actually took* at another machine's and model's
cost per forward: "how would a vehicle's GPU running a 2B model that decodes like this
one drive". It leaves out everything that is not a model forward (image preprocessing,
tokenization, DDS), a few milliseconds on a vehicle computer.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Protocol

from wamdiff2_core.decoding.config import DecodeStats

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMED_PROFILES = {"h200": (REPO_ROOT / "docs" / "gpu" / "bench_2b_sdpa_h200.json", "graphs")}


class LatencyModel(Protocol):
    name: str

    def seconds(self, stats: DecodeStats | None) -> float:
        """Simulated seconds one plan takes (``stats``: its decode; None when the planner
        is not a model). ValueError when this model cannot price it."""


@dataclass(frozen=True)
class FixedLatency:
    """Every plan takes ``ms`` milliseconds (``zero``: 0)."""

    ms: float
    name: str = "fixed"

    def seconds(self, stats: DecodeStats | None) -> float:
        return self.ms / 1e3


@dataclass(frozen=True)
class ProfileLatency:
    """Per-forward costs measured on some machine (milliseconds)."""

    prefill_ms: float
    block_step_ms: float
    commit_ms: float
    ar_step_ms: float
    source: str = ""
    name: str = "profile"
    as_autoregressive: bool = False        # price every decode as one AR step per token

    @classmethod
    def from_bench_json(cls, path: str | Path, mode: str = "graphs") -> "ProfileLatency":
        """The costs of one ``latency_ms`` mode of a ``bench decode --json`` report;
        ValueError naming what is missing."""
        from wamdiff2_core.user_files import read_json

        path = Path(path)
        report = read_json(path, "latency profile")
        if not isinstance(report, dict) or not isinstance(report.get("latency_ms") or {}, dict) \
                or not isinstance(report.get("decoders", {}), dict):
            raise ValueError(f"latency profile {path} is not a `bench decode --json` report")
        modes = report.get("latency_ms") or {}
        if mode not in modes or not isinstance(modes[mode], dict):
            raise ValueError(f"{path} has no latency_ms.{mode} (it has: "
                             f"{', '.join(modes) or 'none'})")
        steps = modes[mode]
        decoders = report.get("decoders", {})
        prefill = [decoders[name].get("prefill_ms_per_call") for name in
                   ("ar_optimised", "diffusion_fast")
                   if isinstance(decoders.get(name), dict)]
        if not prefill:
            raise ValueError(f"{path} has no decoders with prefill_ms_per_call")
        costs = [*prefill, *(steps.get(k) for k in ("block_step", "commit", "ar_step"))]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e7
                   for v in costs if v is not None):
            raise ValueError(f"latency profile {path}: every cost must be a number of "
                             f"milliseconds in [0, 1e7)")
        if None in prefill:
            raise ValueError(f"{path} has no decoders with prefill_ms_per_call")
        try:
            return cls(prefill_ms=sum(prefill) / len(prefill),
                       block_step_ms=float(steps["block_step"]),
                       commit_ms=float(steps["commit"]), ar_step_ms=float(steps["ar_step"]),
                       source=f"{path.name}@{mode} ({report.get('device', '?')}, "
                              f"{report.get('parameters', '?')} parameters)")
        except KeyError as exc:
            raise ValueError(f"{path}: latency_ms.{mode} has no {exc}") from None

    def seconds(self, stats: DecodeStats | None) -> float:
        if stats is None or stats.forwards == 0 and stats.tokens == 0:
            raise ValueError("a profile latency model prices decoding forwards; this planner "
                             "reported none (use fixed:MS for planners that are not models)")
        if self.as_autoregressive:
            decode = stats.tokens * self.ar_step_ms
        elif stats.blocks >= stats.tokens:        # one token per block: autoregressive
            decode = stats.forwards * self.ar_step_ms
        else:
            commits = stats.forwards - stats.denoise_forwards
            decode = stats.denoise_forwards * self.block_step_ms + commits * self.commit_ms
        return (self.prefill_ms + decode) / 1e3


def _fixed(argument: str) -> LatencyModel:
    try:
        ms = float(argument)
    except ValueError:
        raise ValueError(f"fixed:MS needs a number of milliseconds, got {argument!r}") from None
    if not 0.0 <= ms < 60_000:
        raise ValueError(f"fixed:MS must be in [0, 60000) ms, got {ms:g}")
    return FixedLatency(ms)


def _as_ar(model: ProfileLatency, ar: bool) -> ProfileLatency:
    if not ar:
        return model
    return replace(model, as_autoregressive=True, name=f"{model.name}:ar",
                   source=f"{model.source}, every decode priced as autoregressive")


def _profile(argument: str) -> LatencyModel:
    argument, ar = (argument[:-3], True) if argument.endswith(":ar") else (argument, False)
    if not argument:
        raise ValueError("profile:PATH[@MODE] needs the path of a bench decode JSON report")
    path, _, mode = argument.partition("@")
    return _as_ar(ProfileLatency.from_bench_json(path, mode or "graphs"), ar)


def _named(name: str) -> Callable[[str], LatencyModel]:
    def make(argument: str) -> LatencyModel:
        if argument not in ("", "ar"):
            raise ValueError(f"latency model {name!r} takes no argument but ':ar'")
        path, mode = NAMED_PROFILES[name]
        if not path.is_file():
            raise ValueError(f"the {name} profile ({path}) is not in this installation; "
                             "pass profile:PATH to a bench decode JSON report")
        model = replace(ProfileLatency.from_bench_json(path, mode), name=name)
        return _as_ar(model, argument == "ar")
    return make


def _zero(argument: str) -> LatencyModel:
    if argument:
        raise ValueError("latency model 'zero' takes no argument")
    return FixedLatency(0.0, name="zero")


LATENCY_MODELS: dict[str, Callable[[str], LatencyModel]] = {
    "zero": _zero,
    "fixed": _fixed,
    "profile": _profile,
    **{name: _named(name) for name in NAMED_PROFILES},
}


def parse_latency_model(spec: str) -> LatencyModel:
    """``zero`` | ``fixed:MS`` | ``profile:PATH[@MODE]`` | ``h200`` -> a latency model;
    ValueError with the reason otherwise."""
    name, _, argument = spec.partition(":")
    if name not in LATENCY_MODELS:
        known = ["zero", "fixed:MS", "profile:PATH[@MODE][:ar]",
                 *(f"{n}[:ar]" for n in NAMED_PROFILES)]
        raise ValueError(f"unknown latency model {spec!r}; use {' | '.join(known)}")
    return LATENCY_MODELS[name](argument)


def describe(model: LatencyModel) -> dict:
    """The model's numbers, for the report."""
    if isinstance(model, ProfileLatency):
        return {"name": model.name, "source": model.source,
                "prefill_ms": round(model.prefill_ms, 3),
                "block_step_ms": round(model.block_step_ms, 3),
                "commit_ms": round(model.commit_ms, 3), "ar_step_ms": round(model.ar_step_ms, 3)}
    return {"name": model.name, "ms": model.ms}
