"""`wamdiff2 bench decode`: AR optimised vs diffusion reference vs diffusion fast."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from wamdiff2_core.apps.common import (CliError, add_decode_options, add_field_options,
                                       apply_threads, check_model_source,
                                       decode_config, field_overrides,
                                       language_hint, subgroup)
from wamdiff2_core.decoding.config import (DECODE_MODES, DEFAULT_DRAFT_STEPS, ExactConfig,
                                          resolve_decode)
from wamdiff2_core.sim.camera import parse_resolution
from wamdiff2_core.types import bundled_checkpoint_path

AR_TEACHER_SUBDIR = "ar_teacher"      # <checkpoint>/ar_teacher/: the AR teacher, if shipped
HELDOUT_SUBDIR = "heldout"            # <checkpoint>/heldout/train.json: a held-out set, if shipped


def _size(text: str) -> tuple[int, int]:
    try:
        return parse_resolution(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers) -> None:
    bench = subgroup(subparsers, "bench")
    p = bench.add_parser("decode", help="decoding speed (and planning L2) of AR optimised, "
                                        "diffusion reference and diffusion fast")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR",
                     help="trained diffusion checkpoint (default: the bundled model)")
    src.add_argument("--preset", metavar="NAME",
                     help="untrained model of a named shape (tiny, small, qwen3-vl-2b, ...)")
    p.add_argument("--ar-checkpoint", metavar="DIR",
                   help="the AR teacher (default: CHECKPOINT/ar_teacher if present, else the "
                        "diffusion weights decoded token by token: speed only)")
    p.add_argument("--decode-mode", dest="run_modes", default="all",
                   choices=("all",) + DECODE_MODES,
                   help="which modes run beside the AR decoder: diffusion (reference and "
                        "fast), exact (the diffusion model drafts, the verifier checks) or "
                        "all (default)")
    p.add_argument("--verifier", metavar="DIR|self", default=None,
                   help="exact mode's verifier: a next-token checkpoint, or self (the "
                        "diffusion weights read token by token); default: the AR model "
                        "compared, so exact answers must equal its answers")
    p.add_argument("--draft-steps", type=int, default=None, metavar="N",
                   help=f"exact mode's denoising steps per draft (default "
                        f"{DEFAULT_DRAFT_STEPS})")
    p.add_argument("--data", metavar="PATH",
                   help="generated data set (dir with train.json, or a JSON file): prompts "
                        "and ground truth for planning L2 (default for a trained checkpoint: "
                        "CHECKPOINT/heldout if present, else fresh simulator episodes)")
    p.add_argument("--samples", type=int, default=None,
                   help="prompts to decode (default: 8, at least --batch)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: float32)")
    add_decode_options(p, ("block_size", "steps_per_block", "threshold", "commit_rule",
                           "max_new_tokens", "constrained"), flags={"steps_per_block": "--steps"},
                       defaults={"constrained": "both, side by side"})
    add_field_options(p)
    p.add_argument("--mode", default="auto",
                   choices=["auto", "eager", "compile", "graphs", "compile-graphs"],
                   help="fast decoders' execution (auto: CUDA graphs on a GPU, eager on CPU)")
    p.add_argument("--attention", default="auto", choices=["auto", "sdpa", "flashinfer"])
    p.add_argument("--flashinfer-backend", default="auto", choices=["auto", "fa2", "fa3"],
                   help="FlashInfer kernel family (auto: FA3 on Hopper, else FA2)")
    p.add_argument("--sync-every", type=int, default=None,
                   help="steps between done-checks (default: 1 on CPU, 2 on GPU)")
    p.add_argument("--latency-modes", default=None,
                   help="comma-separated modes for the per-forward latency table "
                        "(default: eager and the resolved --mode)")
    p.add_argument("--latency-reps", type=int, default=20, metavar="N",
                   help="timed repetitions of each step in the latency table (default 20)")
    p.add_argument("--latency-only", action="store_true",
                   help="only the per-forward latency table (no decodes: e.g. the 2B shape "
                        "on a CPU)")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed passes over the prompts (default 3): the ratios pool every "
                        "pass and the report shows each pass's fast / AR ratio beside them")
    p.add_argument("--tokens-per-forward", type=float, default=None,
                   help="project tokens/s from the latencies at this tokens/forward "
                        "(e.g. the bundled model's)")
    p.add_argument("--image-size", type=_size, default=(320, 180), metavar="WxH",
                   help="size of the synthetic camera images without --data (default 320x180)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's; 1 is steadier on a busy "
                        "machine)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_bench_decode)


def _load(args):
    """(diffusion model, AR model, trained?, AR is a real teacher?)."""
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.planner import load_model

    source = args.checkpoint or args.preset or bundled_checkpoint_path()
    if source is None:
        raise CliError("this checkout has no bundled model; pass --checkpoint DIR or "
                       "--preset NAME")
    trained = args.preset is None
    check_model_source(source)
    check_model_source(args.ar_checkpoint)
    try:
        model = load_model(source, args.device, args.dtype, fields=field_overrides(args))
        ar_dir = args.ar_checkpoint
        if ar_dir is None and trained and (Path(source) / AR_TEACHER_SUBDIR /
                                           "config.json").exists():
            ar_dir = Path(source) / AR_TEACHER_SUBDIR
        ids = {k: v for k, v in field_overrides(args, block_size=False).items()
               if k != "paradigm"}          # the AR teacher shares the vocabulary, not the rest
        ar = load_model(ar_dir, args.device, args.dtype, fields=ids) if ar_dir else None
    except (CheckpointError, ValueError) as exc:
        raise CliError(str(exc)) from None
    if model.fields.paradigm != "diffusion":
        if args.preset:
            model = model.with_fields(paradigm="diffusion", block_size=args.block_size or 32)
        else:
            raise CliError(f"{source} is an AR checkpoint; pass the diffusion checkpoint as "
                           "--checkpoint and the AR one as --ar-checkpoint")
    if ar is not None and ar.fields.paradigm != "ar":
        raise CliError(f"{ar_dir} is not an AR (next-token) checkpoint")
    teacher = ar is not None
    if ar is None:
        ar = model.with_fields(paradigm="ar", block_size=1)
    return model, ar, trained, teacher


def _verifier(args, model):
    """``--verifier``: the loaded verifier, or None (the AR model compared)."""
    from wamdiff2_core.decoding.verify import load_verifier
    from wamdiff2_core.model.modeling import CheckpointError

    if args.verifier is None or args.run_modes == "diffusion":
        return None
    if args.verifier != "self":
        check_model_source(args.verifier)
    try:
        return load_verifier(model, args.verifier)
    except (CheckpointError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _latency_modes(text: str | None, model, fast) -> list[str]:
    """The modes of the latency table (default: eager and the resolved --mode), each checked
    against the device."""
    from wamdiff2_core.decoding.engine import DecodingEngine
    from wamdiff2_core.decoding.graphs import resolve_mode

    try:
        resolved = DecodingEngine(model, "fast", fast).mode    # checks the device
        modes = text.split(",") if text else ["eager", resolved]
        return list(dict.fromkeys(resolve_mode(m, model.device) for m in modes))
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _check_budget(model, cfg) -> None:
    """The constrained setting needs room for the shortest plan: one sentence otherwise."""
    from wamdiff2_core import tasks
    from wamdiff2_core.decoding.constraints.session import LanguageError, automaton_for

    if cfg.constrained is False:
        return
    try:
        automaton_for(model, tasks.planning_language(), cfg.max_new_tokens)
    except LanguageError as exc:
        raise CliError(language_hint(exc)) from None


def run_bench_decode(args) -> int:
    from wamdiff2_core.apps.bench.decode import (HELDOUT_SEED, data_samples, generated_samples,
                                                 latency_report, run_benchmark,
                                                 synthetic_samples)
    from wamdiff2_core.apps.bench.report import format_report
    from wamdiff2_core.decoding.config import FastConfig

    if args.batch < 1 or (args.samples is not None and args.samples < 1) or \
            args.latency_reps < 1 or args.repeats < 1:
        raise CliError("--batch, --samples, --repeats and --latency-reps must be >= 1")
    try:
        apply_threads(args.threads)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    cfg = decode_config(args)
    try:
        fast = FastConfig(mode=args.mode, attention=args.attention,
                          sync_every=args.sync_every,
                          flashinfer_backend=args.flashinfer_backend)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    model, ar, trained, teacher = _load(args)
    try:
        cfg = resolve_decode(cfg, model.fields)    # the report says the rule it decodes with
        exact = ExactConfig(draft_steps=args.draft_steps)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    verifier = _verifier(args, model)
    _check_budget(model, cfg)
    n = max(args.samples or 8, args.batch)
    data = args.data
    source = args.checkpoint or (None if args.preset else bundled_checkpoint_path())
    if data is None and source and (Path(source) / HELDOUT_SUBDIR / "train.json").exists():
        data = Path(source) / HELDOUT_SUBDIR
    notes = []
    try:
        if data:
            samples = data_samples(data, n)
        elif trained:
            try:
                samples = generated_samples(n)
                data = f"simulator episodes, seed {HELDOUT_SEED} (generated for this run)"
            except ImportError as exc:
                notes.append(f"no --data and the simulator is not installed ({exc.name}): "
                             "planning L2 not measured")
                samples = synthetic_samples(n, args.image_size)
        else:
            samples = synthetic_samples(n, args.image_size)
    except (OSError, ValueError, KeyError) as exc:
        raise CliError(f"cannot read prompts from {data}: {exc}") from None
    modes = _latency_modes(args.latency_modes, model, fast)
    if args.latency_only:
        report = latency_report(model, samples[0], args.batch, cfg, fast, modes,
                                args.latency_reps)
    else:
        report = run_benchmark(model, ar, samples, args.batch, cfg, fast, args.repeats,
                               modes, args.latency_reps, args.tokens_per_forward,
                               trained=trained, ar_is_teacher=teacher,
                               decode_modes=(DECODE_MODES if args.run_modes == "all"
                                             else (args.run_modes,)),
                               verifier=verifier, exact=exact)
    report["data"] = str(data) if data else None
    report["notes"] += notes
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
