"""The decoding benchmark: AR optimised, diffusion reference, diffusion fast and exact fast
(``bench.exact``) on the same prompts in one run, with planning L2 whenever ground truth is
at hand (speed is never shown without quality when it can be measured), plus per-forward
latencies per execution mode. Each decoder runs unconstrained and with the planning language
enforced (docs/decoding.md, "Constrained decoding"), side by side.

Throughput is counted over the decode phase (after the prompt prefill, which every decoder
shares and which is reported apart): tokens are answer tokens up to and including the
end-of-answer token, as in ``DecodeStats``.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from wamdiff2_core import tasks
from wamdiff2_core.apps.bench.exact import EXACT_NAME, exact_report, exact_spec
from wamdiff2_core.apps.bench.latency import forward_latency
from wamdiff2_core.decoding.config import DECODE_MODES, DecodeConfig, ExactConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.output import DecodeOutput
from wamdiff2_core.evaluation.l2 import l2_horizons, l2_per_waypoint
from wamdiff2_core.model.modeling import Wamdiff2Model


@dataclass
class Sample:
    prompt: str
    images: list
    truth: np.ndarray | None = None          # (8, 2) ground-truth waypoints, if known


def synthetic_samples(n: int, size: tuple[int, int] = (320, 180), seed: int = 0
                      ) -> list[Sample]:
    """``n`` planning prompts on seeded random camera images (no ground truth)."""
    rng = np.random.RandomState(seed)
    out = []
    for i in range(n):
        image = (rng.rand(size[1], size[0], 3) * 255).astype(np.uint8)
        command = tasks.COMMANDS[i % len(tasks.COMMANDS)]
        prompt = tasks.planning_prompt(command, (float(rng.uniform(0, 15)), 0.0),
                                       (float(rng.uniform(-1, 1)), 0.0))
        out.append(Sample(prompt, [image]))
    return out


def data_samples(path: str | Path, n: int) -> list[Sample]:
    """The first ``n`` planning records of a generated data set (a directory holding
    ``train.json``, or a JSON file), with their ground-truth waypoints."""
    from wamdiff2_core.evaluation.open_loop import load_image

    path = Path(path)
    file = path / "train.json" if path.is_dir() else path
    root = file.parent
    records = tasks.read_records(file)               # within user_files' limits
    out = []
    for record in records:
        if not isinstance(record, dict) or record.get("task") != "planning":
            continue
        prompt, answer = tasks.record_prompt_and_answer(record)
        future = (record.get("meta") or {}).get("ego_future")
        truth = np.asarray(future, dtype=np.float64) if future is not None \
            else tasks.parse_waypoints(answer)
        out.append(Sample(prompt, [load_image(record, root)], truth))
        if len(out) == n:
            break
    if not out:
        raise ValueError(f"{file} has no planning records")
    return out


HELDOUT_SEED = 4242          # a simulator seed no bundled training data uses
FRAMES_PER_EPISODE = 4


def generated_samples(n: int, seed: int = HELDOUT_SEED) -> list[Sample]:
    """``n`` planning samples with ground truth from fresh simulator episodes (the data
    generator of ``wamdiff2 data generate``, planning task only, in a temporary directory).
    Needs the ``sim`` extra."""
    import tempfile

    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, generate

    episodes = -(-n // FRAMES_PER_EPISODE)
    with tempfile.TemporaryDirectory(prefix="wamdiff2-bench-") as tmp:
        generate(tmp, GeneratorConfig(episodes=episodes, seed=seed, tasks=("planning",),
                                      episode=EpisodeConfig(frames=FRAMES_PER_EPISODE)),
                 progress=False)
        return data_samples(tmp, n)


@dataclass
class DecoderResult:
    """Totals of one decoder over every batch and repeat (tokens and decode time kept per
    repeat in ``passes``, the totals their sums)."""
    name: str
    prefill_ms: float = 0.0
    forwards: int = 0
    blocks: int = 0
    calls: int = 0
    denoise_forwards: int = 0
    verify_forwards: int = 0      # exact mode's (``verify.ExactStats``): 0 for the others
    row_blocks: int = 0
    drafts: int = 0
    passes: list = field(default_factory=list)        # [tokens, decode_ms] of each repeat
    texts: list = field(default_factory=list)         # answers of the last repeat
    sequences: list = field(default_factory=list)
    l2: dict | None = None

    @property
    def tokens(self) -> int:
        return sum(t for t, _ in self.passes)

    @property
    def decode_ms(self) -> float:
        return sum(ms for _, ms in self.passes)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.decode_ms, 1e-9) * 1e3

    def pass_tokens_per_s(self) -> list[float]:
        """Tokens per second of each timed pass over the prompts."""
        return [t / max(ms, 1e-9) * 1e3 for t, ms in self.passes]

    @property
    def ms_per_token(self) -> float:
        return self.decode_ms / max(self.tokens, 1)

    @property
    def ms_per_forward(self) -> float:
        return self.decode_ms / max(self.forwards, 1)

    @property
    def forwards_per_block(self) -> float:
        return self.forwards / max(self.blocks, 1)

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / max(self.forwards, 1)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items()
             if k not in ("texts", "sequences", "passes")}
        d.update(tokens=self.tokens, decode_ms=self.decode_ms,
                 tokens_per_s=self.tokens_per_s, pass_tokens_per_s=self.pass_tokens_per_s(),
                 ms_per_token=self.ms_per_token,
                 ms_per_forward=self.ms_per_forward,
                 forwards_per_block=self.forwards_per_block,
                 tokens_per_forward=self.tokens_per_forward,
                 prefill_ms_per_call=self.prefill_ms / max(self.calls, 1))
        return d


@dataclass
class DecoderSpec:
    """One decoder of the comparison: the engine that decodes, its settings and the
    answers' language (enforced unless ``cfg.constrained`` is False)."""
    name: str
    engine: DecodingEngine
    cfg: DecodeConfig
    language: tasks.AnswerLanguage | None = None

    def encode(self, samples: Sequence[Sample]) -> dict:
        """The samples' prompts and images as one batch for this decoder's model."""
        return self.engine.model.processor.encode_prompts([s.prompt for s in samples],
                                                          [s.images for s in samples])

    def warmup(self, batch: dict) -> None:
        self.engine.warmup(batch, self.cfg, self.language)

    def decode(self, batch: dict) -> DecodeOutput:
        """The ``DecodeOutput`` of an encoded batch with this decoder's settings."""
        return self.engine.decode(batch, self.cfg, self.language)

    def answer_text(self, sequence: list[int]) -> str:
        return self.engine.model.processor.decode_answer(sequence)


def run_decoders(specs: Sequence[DecoderSpec], samples: Sequence[Sample], batch: int,
                 repeats: int = 1) -> dict[str, DecoderResult]:
    """Decode every sample in batches of ``batch`` with each decoder, ``repeats`` times,
    after one untimed warm-up batch per decoder (which builds caches, compiles or captures
    graphs). The decoders take turns on each batch, so a machine whose load drifts during
    the run slows them alike."""
    batches = [samples[i:i + batch] for i in range(0, len(samples), batch)]
    encoded = {sp.name: [sp.encode(b) for b in batches] for sp in specs}
    for sp in specs:
        sp.warmup(encoded[sp.name][0])
    results = {sp.name: DecoderResult(sp.name) for sp in specs}
    for r in range(repeats):
        for res in results.values():
            res.passes.append([0, 0.0])
        for i in range(len(batches)):
            for sp in specs:
                out = sp.decode(encoded[sp.name][i])
                res, st = results[sp.name], out.stats
                res.passes[-1][0] += st.tokens
                res.passes[-1][1] += st.decode_ms
                res.prefill_ms += st.prefill_ms
                res.forwards += st.forwards
                res.blocks += st.blocks
                res.calls += 1
                for name in ("denoise_forwards", "verify_forwards", "row_blocks", "drafts"):
                    setattr(res, name, getattr(res, name) + getattr(st, name, 0))
                if r == repeats - 1:
                    res.sequences += out.sequences
                    res.texts += [sp.answer_text(q) for q in out.sequences]
    for res in results.values():
        res.l2 = planning_l2(res.texts, samples)
    return results


def planning_l2(texts: Sequence[str], samples: Sequence[Sample]) -> dict | None:
    """Planning L2 of answers against the samples' ground truth (None without any): the
    mean over parsed answers of the L2 averaged up to 1/2/3 s, and how many failed to parse."""
    pairs = [(t, s.truth) for t, s in zip(texts, samples) if s.truth is not None]
    if not pairs:
        return None
    errors, failed = [], 0
    for text, truth in pairs:
        try:
            errors.append(l2_per_waypoint(tasks.parse_waypoints(text), truth))
        except tasks.AnswerParseError:
            failed += 1
    out = {"samples": len(pairs), "parse_failures": failed, "l2_avg": None}
    if errors:
        h = l2_horizons(np.mean(errors, axis=0))
        out.update(h)
        out["l2_avg"] = float(np.mean([h["l2_avg_1s"], h["l2_avg_2s"], h["l2_avg_3s"]]))
    return out


def _parses(text: str) -> bool:
    try:
        tasks.parse_waypoints(text)
        return True
    except tasks.AnswerParseError:
        return False


def paired_l2(texts_a: Sequence[str], texts_b: Sequence[str], samples: Sequence[Sample]
              ) -> dict | None:
    """Planning L2 of two decoders over the same frames: those with ground truth where both
    answers parse (a decoder that fails to parse its hard frames is not rewarded with a
    lower mean). None when no frame qualifies."""
    keep = [i for i, s in enumerate(samples) if s.truth is not None
            and _parses(texts_a[i]) and _parses(texts_b[i])]
    if not keep:
        return None
    pick = [samples[i] for i in keep]
    a = planning_l2([texts_a[i] for i in keep], pick)
    b = planning_l2([texts_b[i] for i in keep], pick)
    return {"samples": len(keep), "l2_avg_a": a["l2_avg"], "l2_avg_b": b["l2_avg"]}


def token_agreement(a: Sequence[list[int]], b: Sequence[list[int]]) -> float:
    """Fraction of answer positions (over the longer answer of each pair) holding the same
    token in both decodes: 1.0 when the decoders agree exactly."""
    same = total = 0
    for x, y in zip(a, b):
        same += sum(p == q for p, q in zip(x, y))
        total += max(len(x), len(y))
    return same / total if total else 1.0


DECODER_NAMES = ("ar_optimised", "diffusion_reference", "diffusion_fast")
CONSTRAINED_SUFFIX = "_constrained"        # the constrained setting's decoders' names
TARGETS = {"fast_vs_ar": 3.0, "fast_vs_reference": 1.5, "l2_fast_vs_ar": 1.05}


def _decoders(engines: dict[str, DecodingEngine], cfg: DecodeConfig,
              constrained: bool, names: Sequence[str] = DECODER_NAMES) -> list[DecoderSpec]:
    """The decoders ``names`` of one setting (constrained: the planning language enforced),
    on their engines."""
    language = tasks.planning_language()
    cfg = replace(cfg, constrained=constrained)
    ar_cfg = DecodeConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                          seed=cfg.seed, constrained=constrained)
    suffix = CONSTRAINED_SUFFIX if constrained else ""
    return [DecoderSpec(name + suffix, engines[name], ar_cfg if name == "ar_optimised" else cfg,
                        language) for name in names]


def _comparison(runs: dict[str, DecoderResult], suffix: str, samples: Sequence[Sample],
                ar_is_teacher: bool) -> dict:
    """Ratios, fast == reference, paired L2 and targets of one setting's three decoders."""
    ar, ref, fst = (runs[n + suffix] for n in DECODER_NAMES)
    ratios = {"fast_vs_ar": fst.tokens_per_s / ar.tokens_per_s,
              "fast_vs_reference": fst.tokens_per_s / ref.tokens_per_s,
              "reference_vs_ar": ref.tokens_per_s / ar.tokens_per_s}
    # Each pass's ratio (the decoders take turns on every batch, so a pass's numbers are
    # paired): their spread says how far one run's pooled ratio can be trusted here.
    per_pass = [f / a for f, a in zip(fst.pass_tokens_per_s(), ar.pass_tokens_per_s())]
    paired = paired_l2(fst.texts, ar.texts, samples) if ar_is_teacher else None
    if paired and paired["l2_avg_b"]:
        ratios["l2_fast_vs_ar"] = paired["l2_avg_a"] / paired["l2_avg_b"]
    out = {
        "ratios": ratios,
        "fast_vs_ar_per_pass": {"values": per_pass, "median": statistics.median(per_pass),
                                "min": min(per_pass), "max": max(per_pass)},
        "fast_matches_reference": fst.sequences == ref.sequences,
        "fast_token_agreement": token_agreement(fst.sequences, ref.sequences),
        "l2_paired": paired,
        "targets": {k: {"want": v, "got": ratios.get(k),
                        "met": None if k not in ratios else
                        (ratios[k] <= v if k.startswith("l2") else ratios[k] >= v)}
                    for k, v in TARGETS.items()},
    }
    quality = out["targets"]["l2_fast_vs_ar"]
    if quality["met"] and fst.l2["parse_failures"] > ar.l2["parse_failures"]:
        # An unparsed plan is no plan: the L2 target needs at least the teacher's parse rate.
        quality["met"] = False
        quality["why"] = (f"{fst.l2['parse_failures']} diffusion plans do not parse "
                          f"(AR: {ar.l2['parse_failures']})")
    return out


def constraint_settings(cfg: DecodeConfig) -> tuple[bool, ...]:
    """The settings a benchmark compares: both side by side unless ``cfg.constrained``
    names one."""
    return (False, True) if cfg.constrained is None else (cfg.constrained,)


def latency_report(model: Wamdiff2Model, sample: Sample, batch: int, cfg: DecodeConfig,
                   fast: FastConfig = FastConfig(), latency_modes: Sequence[str] = ("eager",),
                   latency_reps: int = 20, engine: DecodingEngine | None = None) -> dict:
    """The benchmark's description of the set-up and its per-forward latency table alone
    (no decodes: ``bench decode --latency-only``), the constrained rows when
    ``constraint_settings(cfg)`` holds the constrained setting. ``engine``: the fast engine
    of ``model`` whose resolved settings are reported (default: one built here)."""
    settings = constraint_settings(cfg)
    engine = engine or DecodingEngine(model, "fast", fast)
    block = cfg.block_size or model.fields.block_size
    language = tasks.planning_language() if True in settings else None
    latency = {mode: forward_latency(model, sample, batch, block,
                                     FastConfig(**{**asdict(fast), "mode": mode}),
                                     latency_reps, language)
               for mode in latency_modes}
    return {
        "device": str(model.device), "dtype": str(engine.dtype).replace("torch.", ""),
        "parameters": model.num_parameters(), "decode": cfg.to_dict(), "block_size": block,
        "constraints": ["on" if c else "off" for c in settings],
        "fast": {**asdict(fast), "resolved_mode": engine.mode,
                 "resolved_attention": engine.attention, "sync_every": engine.sync_every},
        "batch": batch, "latency_reps": latency_reps, "latency_ms": latency, "notes": [],
    }


def run_benchmark(model: Wamdiff2Model, ar_model: Wamdiff2Model, samples: Sequence[Sample],
                  batch: int, cfg: DecodeConfig, fast: FastConfig = FastConfig(),
                  repeats: int = 1, latency_modes: Sequence[str] = ("eager",),
                  latency_reps: int = 20, tokens_per_forward: float | None = None,
                  trained: bool = True, ar_is_teacher: bool = True,
                  decode_modes: Sequence[str] = DECODE_MODES,
                  verifier: Wamdiff2Model | None = None,
                  exact: ExactConfig = ExactConfig()) -> dict:
    """Every number of the benchmark as one JSON-serialisable dict (see docs/decoding.md).

    ``model`` is the diffusion model; ``ar_model`` the next-token model (the AR teacher, or
    the same weights read as next-token when no teacher is given). The decoders run on the
    same samples with the same decode settings, unconstrained and with the planning
    language enforced (``constraint_settings``: both unless ``cfg.constrained`` picks one),
    all taking turns on every batch: AR optimised, and for the ``decode_modes`` asked, diffusion
    reference and fast, and exact fast (verified by ``verifier``, default ``ar_model``;
    drafted as ``exact`` sets: ``bench.exact``). The top-level ratios are the first
    setting's diffusion ones; with both settings, ``constrained`` holds the constrained
    setting's; ``exact`` holds exact mode's per setting."""
    settings = constraint_settings(cfg)
    engines = {"ar_optimised": DecodingEngine(ar_model, "fast", fast),
               "diffusion_reference": DecodingEngine(model, "reference"),
               "diffusion_fast": DecodingEngine(model, "fast", fast),
               EXACT_NAME: DecodingEngine(model, "fast", fast, verifier=verifier or ar_model,
                                          exact=exact)}
    names = DECODER_NAMES if "diffusion" in decode_modes else DECODER_NAMES[:1]
    specs = [sp for c in settings for sp in _decoders(engines, cfg, c, names)]
    if "exact" in decode_modes:
        specs += [exact_spec(DecoderSpec, engines[EXACT_NAME], cfg, c,
                             CONSTRAINED_SUFFIX if c else "") for c in settings]
    runs = run_decoders(specs, samples, batch, repeats)
    primary = CONSTRAINED_SUFFIX if settings[0] else ""
    report = {
        **latency_report(model, samples[0], batch, cfg, fast, latency_modes, latency_reps,
                         engines["diffusion_fast"]),
        "trained": trained, "samples": len(samples), "repeats": repeats,
        "decoders": {n: r.to_dict() for n, r in runs.items()},
    }
    if "diffusion" in decode_modes:
        report.update(_comparison(runs, primary, samples, ar_is_teacher))
        if len(settings) == 2:
            report["constrained"] = _comparison(runs, CONSTRAINED_SUFFIX, samples,
                                                ar_is_teacher)
    if "exact" in decode_modes:
        report.update(exact_report(runs, report["latency_ms"], model, ar_model, verifier,
                                   samples[0], batch, cfg, fast, exact, latency_reps,
                                   {c: CONSTRAINED_SUFFIX if c else "" for c in settings}))
    if not ar_is_teacher:
        report["notes"].append(
            "no AR teacher given (--ar-checkpoint): 'AR optimised' decodes the diffusion "
            "weights token by token, so its speed is an AR decoder's on this architecture "
            "but its answers and L2 are not the teacher's")
    if not trained:
        report["notes"].append(
            "untrained weights: tokens/forward here is not a trained model's; diffusion "
            "throughput is tokens/forward divided by the per-forward latency, so read the "
            "latency table (and the projection, given --tokens-per-forward)")
    if tokens_per_forward:
        report["projection"] = {
            mode: {"tokens_per_forward": tokens_per_forward,
                   "diffusion_tokens_per_s": tokens_per_forward * 1e3 / lat["block_step"],
                   "ar_tokens_per_s": 1e3 / lat["ar_step"]}
            for mode, lat in report["latency_ms"].items()}
    return report
