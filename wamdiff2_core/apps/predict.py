"""`wamdiff2 predict`: a checkpoint's answers on a data set, in the reference's predictions
format; batched, on many processes under torchrun, resumable (docs/evaluation.md).

    torchrun --nproc-per-node 8 -m wamdiff2_core.cli predict --checkpoint CKPT \\
        --input eval.json --output predictions.json --batch-size 32 --device cuda
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

from wamdiff2_core.apps.candidate_options import add_candidate_options, candidate_settings
from wamdiff2_core.apps.common import (CliError, add_decode_options, add_exact_options,
                                       add_model_arguments, apply_threads, planner_from_args)
from wamdiff2_core.apps.outputs import check_output
from wamdiff2_core.tasks import RECORDS_FILE


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "predict", help="answers on a data set, in the reference's predictions format",
        description="Decode every record of a data set (the reference repository's "
                    "conversation JSON or JSONL, or a data set directory) in batches grouped "
                    "by prompt length and write one predictions JSON in the reference's "
                    "format. Under torchrun each process decodes its share; rank 0 merges.")
    p.add_argument("--input", required=True, metavar="PATH",
                   help=f"records file (.json list or .jsonl) or data set directory (reads "
                        f"{RECORDS_FILE}); where relative image paths are: --image-root")
    p.add_argument("--output", required=True, metavar="FILE",
                   help="predictions file to write (.json: a JSON list, .jsonl: one object "
                        "per line); its parts go to FILE.parts/ until the run ends")
    add_image_root_option(p, "--input")
    add_model_arguments(p)
    add_exact_options(p)
    add_decode_options(p, ("max_new_tokens",))
    add_predict_options(p)
    add_candidate_options(p)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch per process (default: torch's)")
    p.add_argument("--json", action="store_true",
                   help="end with the summary as one JSON object instead of a line")
    p.set_defaults(func=run_predict_command)


def add_image_root_option(parser: argparse.ArgumentParser, option: str) -> None:
    """--image-root: where relative image paths are (shared by `predict` and `eval
    open-loop`; the rule: ``tasks.inputs``, docs/evaluation.md)."""
    parser.add_argument("--image-root", metavar="DIR", default=None,
                        help=f"folder the relative image paths of {option} are under "
                             f"(default: the data set directory, or the records file's folder "
                             f"when every record names a task; for records without a task, "
                             f"in the reference's layout, the working directory, as the "
                             f"reference's inference script opens them); printed at start")


def add_predict_options(parser: argparse.ArgumentParser) -> None:
    """--batch-size, --resume, --no-progress, --warmup: how a predictions run goes (shared by
    `predict` and `eval open-loop`)."""
    parser.add_argument("--batch-size", type=int, default=1, metavar="N",
                        help="records decoded together, grouped by prompt length (default 1)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the predictions an interrupted run (or an earlier output) "
                             "already has and decode the rest")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--warmup", action="store_true",
                        help="decode each process's first batch once before timing (CUDA "
                             "graph capture and compilation stay out of the summary's speed)")


def predict_settings(args: argparse.Namespace):
    """The ``PredictSettings`` of the options ``add_predict_options`` added."""
    from wamdiff2_core.evaluation.predict_run import PredictSettings

    try:
        return PredictSettings(batch_size=args.batch_size, resume=args.resume,
                               progress=not args.no_progress, warmup=args.warmup)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def read_input(data: str, image_root: str | None, option: str = "--input"):
    """The records of ``data`` and where their images are (``tasks.inputs``); one
    CliError when the input cannot be read (a bad record is not: it fails alone)."""
    from wamdiff2_core.tasks.inputs import read_input as read

    try:
        return read(data, image_root, option)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def announce(command: str, root) -> None:
    """The image-path rule, once at the start of a run (rank 0 alone under torchrun), as a
    note: a refusal after it is still the one sentence of the run."""
    if os.environ.get("RANK", "0") == "0":
        print(f"note: {command}: {root.describe()}", file=sys.stderr, flush=True)


def manifest(args: argparse.Namespace, planner, records: list, image_root: Path) -> dict:
    """What a run's parts belong to: the records (their canonical JSON's sha256), the folder
    their images are under and the decoding settings."""
    text = json.dumps(records, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return {"input": hashlib.sha256(text).hexdigest(), "image root": str(image_root),
            "checkpoint": str(args.checkpoint or getattr(args, "preset", None) or "bundled"),
            "dtype": str(getattr(args, "dtype", None)), "decode": planner.decode.to_dict(),
            "planning decode": planner.plan_decode.to_dict(),
            **({} if planner.picker is None else {"candidates": {
                **dataclasses.asdict(planner.candidates),
                "scorer_weights": planner.picker.weights and str(planner.picker.weights)}}),
            **({"verifier": planner.verifier_name}          # exact mode's (None otherwise)
               if planner.verifier_name else {})}


def predict_to(args: argparse.Namespace, settings, planner, ctx, records: list,
               image_root: Path, output: Path):
    """Run predict into ``output``; the summary on rank 0, None elsewhere; one CliError when
    the run cannot start."""
    from wamdiff2_core.evaluation.predict_run import run_predict

    try:
        return run_predict(planner, records, image_root, output, settings,
                           manifest(args, planner, records, image_root), ctx)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def run_predict_command(args: argparse.Namespace) -> int:
    output = check_output(args.output, "--output", folder=False)
    settings = predict_settings(args)
    candidates = candidate_settings(args)        # CliError with the reason when out of range
    try:
        apply_threads(args.threads)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    data = read_input(args.input, args.image_root)
    announce("wamdiff2 predict", data.image_root)
    from wamdiff2_core.evaluation.predict_run import join_ranks
    from wamdiff2_core.training.distributed import close_process_group

    ctx, args.device = join_ranks(args.device)
    try:
        planner = planner_from_args(args, **candidates)
        summary = predict_to(args, settings, planner, ctx, data.records,
                             data.image_root.path, output)
    finally:
        close_process_group()
    if summary is None:
        return 0
    return report_summary("wamdiff2 predict", summary, args.json, output)


def report_summary(command: str, summary, as_json: bool, output: Path | None) -> int:
    """Print a run's summary (and where its failures are); the exit code: 1 when every
    record failed (nothing to show: most likely the input or the image paths are wrong),
    else 0."""
    failures = summary.failure_line()
    if summary.all_failed:
        print(f"{command}: every record failed; {failures}", file=sys.stderr)
    elif failures:
        print(f"{command}: {failures}", file=sys.stderr)
    if as_json:
        print(json.dumps(summary.to_dict()))
    elif output is not None:
        print(f"{command}: {summary.line()}; wrote {output}")
    return 1 if summary.all_failed else 0
