"""``wamdiff2 eval open-loop``: score a checkpoint on a generated data set.

Thin: parse arguments, load records and the planner, call :func:`evaluate_open_loop`, write
the report. ``--checkpoint ground-truth`` answers with the records' own answers (no model).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from wamdiff2_core.decoding.config import COMMIT_RULES

DEFAULT_OUT = "runs/eval/open-loop"
RECORDS_FILE = "train.json"      # what `wamdiff2 data generate` writes (docs/INTERFACES.md)


def register(subparsers) -> None:
    """Add ``eval open-loop`` to the shared ``eval`` group."""
    from wamdiff2_core.cli import subgroup

    group = subgroup(subparsers, "eval", help="evaluate a planner (open loop, closed loop)")
    parser = group.add_parser(
        "open-loop", help="L2, collisions, detection mAP and QA accuracy on recorded samples",
        description="Score a checkpoint on a data set's records: L2 per waypoint and at "
                    "1/2/3 s, collision rate, detection mAP/AP50, QA exact match, parse "
                    "failures. Writes open_loop.json, open_loop.txt and PNG plots to --out.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory, preset name (e.g. tiny), or "
                             "'ground-truth' to answer with the recorded answers")
    parser.add_argument("--data", required=True,
                        help=f"data set directory (reads {RECORDS_FILE}) or a records file "
                             "(.json list or .jsonl); image paths are relative to its folder")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"report directory (default: {DEFAULT_OUT})")
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report on stdout instead of the text summary")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="evaluate only the first N records (after --tasks)")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated tasks to evaluate (default: all)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="decode block size (default: the checkpoint's)")
    parser.add_argument("--steps-per-block", type=int, default=None,
                        help="denoising steps per block (default: the block size)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="answer length cap in tokens (default: the decoder's)")
    parser.add_argument("--commit-rule", default=None, choices=COMMIT_RULES,
                        help="which masked positions a denoising step commits (default: "
                             "low_confidence_dynamic)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="confidence threshold of the dynamic, budget and leftmost rules "
                             "(default 0.9)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_open_loop)


def load_records(data: str | Path) -> tuple[list[dict], Path]:
    """Records of a data set directory or records file, and the folder images are under."""
    from wamdiff2_core.cli import CliError

    path = Path(data)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.is_file():
        raise CliError(f"no records file at {path}")
    text = path.read_text()
    try:
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(records, list):
        raise CliError(f"{path} must hold a list of records")
    return records, path.parent


def _select(records: list[dict], tasks: str | None, limit: int | None) -> list[dict]:
    from wamdiff2_core.cli import CliError

    if tasks:
        wanted = {t.strip() for t in tasks.split(",") if t.strip()}
        from .scorers import SCORERS
        unknown = wanted - set(SCORERS)
        if unknown:
            raise CliError(f"unknown task(s) {sorted(unknown)}; known: {sorted(SCORERS)}")
        records = [r for r in records if r.get("task") in wanted]
    if limit is not None:
        if limit < 1:
            raise CliError("--limit must be at least 1")
        records = records[:limit]
    return records


def _predictor(args: argparse.Namespace):
    """The predict function and provenance for ``--checkpoint``."""
    from wamdiff2_core.cli import CliError, decode_config
    from .predictors import GROUND_TRUTH, ground_truth_predictor, planner_predictor

    # checked first, also for ground-truth answers
    decode = decode_config(block_size=args.block_size, steps_per_block=args.steps_per_block,
                           max_new_tokens=args.max_new_tokens, commit_rule=args.commit_rule,
                           threshold=args.threshold)
    if args.checkpoint == GROUND_TRUTH:
        return ground_truth_predictor(), {"checkpoint": GROUND_TRUTH}
    from wamdiff2_core.planner import Planner

    try:
        planner = Planner.from_pretrained(args.checkpoint, decode=decode, device=args.device)
    except ValueError as exc:          # CheckpointError: not a checkpoint, not a preset
        raise CliError(str(exc)) from None
    info = {"checkpoint": args.checkpoint, "device": args.device, "decode": decode.to_dict()}
    return planner_predictor(planner), info


def run_open_loop(args: argparse.Namespace) -> int:
    from .open_loop import evaluate_open_loop
    from .report import write_report

    records, image_root = load_records(args.data)
    records = _select(records, args.tasks, args.limit)
    predict, info = _predictor(args)
    report = evaluate_open_loop(records, predict, image_root, progress=not args.no_progress)
    report = dataclasses.replace(report, info={**info, "data": str(args.data)})
    paths = write_report(report, args.out)
    print(report.to_json() if args.json else report.summary())
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0
