"""Exact mode in the decoding benchmark: its decoders beside the others, what they accept,
their speed against the AR teacher's optimised decoder, and projections from measured step
costs (docs/decoding.md, "Exact mode").

An exact decode's answers are its verifier's greedy answers, so where the verifier is the AR
model the benchmark compares against (the teacher, or without one the diffusion weights read
token by token), the answers must equal ``ar_optimised``'s token for token and the paired L2
ratio is 1.00 by construction. Both decoders then produce the same tokens, so on a device
where a forward of a block costs one AR step (a GPU at small batch), the speed-up is the
ratio of their forwards: the GPU projection (tokens per forward, exact over AR, which is the
same number when the answers are the same).
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Sequence

import torch

from wamdiff2_core import tasks
from wamdiff2_core.apps.bench.latency import step_ms
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.step_probes import verify_steps
from wamdiff2_core.model.modeling import Wamdiff2Model

EXACT_NAME = "exact_fast"
#: CPU: tokens/s against the AR teacher's optimised decoder with the teacher as verifier;
#: GPU projection: AR forwards / exact forwards (a block forward costing one AR step).
EXACT_TARGETS = {"exact_vs_ar": 1.5, "exact_gpu_projection": 4.0}


def exact_spec(spec_type, engine: DecodingEngine, cfg: DecodeConfig, constrained: bool,
               suffix: str):
    """The exact decoder of one constraint setting (``spec_type``: the benchmark's
    ``DecoderSpec``), drafting with ``cfg``'s rule on ``engine``."""
    return spec_type(EXACT_NAME + suffix, engine,
                     replace(cfg, constrained=constrained, mode="exact", temperature=0.0),
                     tasks.planning_language())


def exact_comparison(ar, exact, verifier_is_ar: bool, latency: dict | None = None) -> dict:
    """The exact decoder's numbers against the AR decoder's (``DecoderResult`` of each, same
    prompts and passes): tokens/s ratio (pooled and per pass), whether the answers are the
    AR decoder's, acceptance, forwards and the projections."""
    per_pass = [e / a for e, a in zip(exact.pass_tokens_per_s(), ar.pass_tokens_per_s())]
    ratio = exact.tokens_per_s / ar.tokens_per_s
    # tokens per forward against the AR decoder's: with the same answers, AR forwards / exact
    # forwards
    gpu = exact.tokens_per_forward / ar.tokens_per_forward
    out = {
        "ratios": {"exact_vs_ar": ratio},
        "exact_vs_ar_per_pass": {"values": per_pass, "median": statistics.median(per_pass),
                                 "min": min(per_pass), "max": max(per_pass)},
        # None: the verifier is not the AR decoder compared, so the answers are not its
        "matches_ar": exact.sequences == ar.sequences if verifier_is_ar else None,
        "accepted_per_block": exact.tokens / max(exact.row_blocks, 1),
        "tokens_per_forward": exact.tokens_per_forward,
        "forwards": {"draft": exact.denoise_forwards, "verify": exact.verify_forwards,
                     "commit": exact.forwards - exact.denoise_forwards
                     - exact.verify_forwards, "ar": ar.forwards},
        "gpu_projection": gpu,
    }
    if latency:
        out["projection_from_steps"] = {mode: _from_steps(exact, ar, lat)
                                        for mode, lat in latency.items()}
    out["targets"] = {k: {"want": v, "got": {"exact_vs_ar": ratio,
                                              "exact_gpu_projection": gpu}[k]}
                      for k, v in EXACT_TARGETS.items()}
    for t in out["targets"].values():
        t["met"] = None if t["got"] is None else t["got"] >= t["want"]
    return out


def exact_report(runs: dict, latency: dict, model: Wamdiff2Model, ar_model: Wamdiff2Model,
                 verifier: Wamdiff2Model | None, sample, batch: int, cfg: DecodeConfig,
                 fast: FastConfig, exact: ExactConfig, reps: int, suffixes: dict) -> dict:
    """The benchmark's exact-mode entries: the verify step timed into each mode of the
    ``latency`` table, and per constraint setting (``suffixes``: constrained? -> decoder
    name suffix) the comparison of exact fast with AR optimised (``runs``)."""
    block = cfg.block_size or model.fields.block_size
    for mode, lat in latency.items():
        lat.update(verify_latency(model, verifier or ar_model, sample, batch, block,
                                  replace(fast, mode=mode), exact, reps))
    return {"exact": {"on" if c else "off": exact_comparison(
                runs["ar_optimised" + s], runs[EXACT_NAME + s], verifier in (None, ar_model),
                latency) for c, s in suffixes.items()},
            "exact_settings": exact.summary()}


def _from_steps(exact, ar, lat: dict) -> dict:
    """This run's forwards priced at the latency table's step costs: what the two decoders'
    decode time would be from their forwards alone (each draft's first step fused)."""
    if "exact_verify" not in lat:
        return {}
    fused = exact.drafts - exact.calls            # a call's first draft has nothing to commit
    exact_ms = (fused * lat["first_step"] + (exact.denoise_forwards - fused)
                * lat["block_step"] + exact.verify_forwards * lat["exact_verify"])
    ar_ms = ar.forwards * lat["ar_step"]
    return {"exact_ms": exact_ms, "ar_ms": ar_ms, "ratio": ar_ms / max(exact_ms, 1e-9)}


@torch.inference_mode()
def verify_latency(model: Wamdiff2Model, verifier: Wamdiff2Model, sample, batch: int,
                   block: int, fast: FastConfig, exact: ExactConfig, reps: int) -> dict:
    """Milliseconds of an exact decode's verify step (the verifier's causal forward of
    ``verify_width`` positions with its choice and acceptance) at batch ``batch``, timed on
    the state a short decode built."""
    enc = model.processor.encode_prompts([sample.prompt] * batch, [sample.images] * batch)
    diff = model.with_fields(paradigm="diffusion", block_size=block)
    engine = DecodingEngine(diff, "fast", fast, verifier=verifier, exact=exact)
    probe = verify_steps(engine, enc, DecodeConfig(block_size=block, max_new_tokens=2 * block,
                                                   constrained=False, mode="exact"))
    rewind, step = probe.rewind, probe.verify

    def verify():                            # every timed verify reads from offset 0
        rewind()
        step()
    return {"exact_verify": step_ms(verify, reps, engine.sync)
            - step_ms(rewind, reps, engine.sync), "verify_width": probe.width}


def exact_lines(c: dict, title: str) -> Sequence[str]:
    """The report's lines of one setting's exact comparison."""
    f = c["forwards"]
    same = {True: "yes", False: "NO", None: "n/a (the verifier is not the AR decoder)"}
    lines = ["", f"exact mode ({title}):",
             f"{'exact fast / AR optimised (tokens/s)':<50}{c['ratios']['exact_vs_ar']:>8.2f}x"]
    spread = c["exact_vs_ar_per_pass"]
    if len(spread["values"]) > 1:
        each = " ".join(f"{v:.2f}" for v in spread["values"])
        lines.append(f"  each pass: {each} (median {spread['median']:.2f}x)")
    lines += [f"{'answers == AR optimised answers':<50}{same[c['matches_ar']]:>9}",
              f"{'accepted tokens per block (verify)':<50}{c['accepted_per_block']:>9.2f}",
              f"{'tokens per forward (draft + verify)':<50}{c['tokens_per_forward']:>9.2f}",
              f"forwards: {f['draft']} draft, {f['verify']} verify, {f['commit']} commit; "
              f"AR {f['ar']}"]
    lines.append(f"{'GPU projection (tokens/forward, exact / AR)':<50}"
                 f"{c['gpu_projection']:>8.2f}x")
    for mode, p in (c.get("projection_from_steps") or {}).items():
        if p:
            lines.append(f"projection from the {mode} step costs: {p['ratio']:.2f}x "
                         f"({p['exact_ms']:.0f} ms vs AR {p['ar_ms']:.0f} ms)")
    return lines
