"""`eval compare --data`: two planners' answers to the same records, paired by record.

A side is ``predictions:FILE`` (a predictions file, `wamdiff2 predict`'s or the reference's,
matched to the records) or ``checkpoint:DIR`` (decoded as `wamdiff2 predict` decodes, into
``OUT/predictions_a.json`` / ``_b.json``, resumable). Each record is scored by the open-loop
scoring on its own (``evaluation.comparison.record_values``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wamdiff2_core.apps.common import CliError, check_model_source


def _records(args: argparse.Namespace) -> tuple[list, Path]:
    """The records of --data after --tasks and --limit, and the folder their images are in
    (the rule of `predict` and `eval open-loop`: ``tasks.inputs``; --image-root wins)."""
    from wamdiff2_core.tasks.inputs import read_input
    from wamdiff2_core.evaluation.scorers import SCORERS
    from wamdiff2_core.tasks import record_task

    try:
        data = read_input(args.data, getattr(args, "image_root", None), "--data")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    records = data.records
    if args.tasks:
        wanted = {t.strip() for t in args.tasks.split(",") if t.strip()}
        if wanted - set(SCORERS):
            raise CliError(f"unknown task(s) {sorted(wanted - set(SCORERS))}; known: "
                           f"{sorted(SCORERS)}")
        records = [r for r in records if isinstance(r, dict) and record_task(r) in wanted]
    if args.limit is not None:
        if args.limit < 1:
            raise CliError("--limit must be at least 1")
        records = records[:args.limit]
    if not records:
        raise CliError(f"{args.data} has no records to compare (after --tasks / --limit)")
    print(data.image_root.describe(), file=sys.stderr)
    return records, data.image_root.path


def _items(args: argparse.Namespace, side: str, spec: dict, records: list,
           image_root: Path) -> list:
    """The predictions-file object answering each record, for one side."""
    from wamdiff2_core.evaluation.predictions import match, read_predictions

    kind, _, source = spec["spec"].partition(":")
    if kind == "predictions" and source:
        if spec["options"]:
            raise CliError(f"--{side}-option settings decode a checkpoint; predictions:"
                           f"{source} is decoded already")
        try:
            return match(records, read_predictions(source), source)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if kind != "checkpoint" or not source:
        raise CliError(f"with --data, --{side} is checkpoint:DIR or predictions:FILE, not "
                       f"{spec['spec']!r}")
    output = Path(args.out) / f"predictions_{side}.json"
    _decode(args, source, spec, records, image_root, output)
    return match(records, read_predictions(output), str(output))


def _decode(args: argparse.Namespace, path: str, spec: dict, records: list,
            image_root: Path, output: Path) -> None:
    """Decode the records with checkpoint ``path`` and its settings into ``output``."""
    from wamdiff2_core.evaluation.predict_run import PredictSettings, run_predict
    from wamdiff2_core.planner import Planner, PlannerConfig

    check_model_source(path)
    settings = spec["settings"]
    try:
        planner = Planner.from_pretrained(path, PlannerConfig(**settings), device=args.device)
        output.parent.mkdir(parents=True, exist_ok=True)
        run_predict(planner, records, image_root, output,
                    PredictSettings(batch_size=args.batch_size, resume=args.resume,
                                    progress=not args.no_progress),
                    manifest={"checkpoint": path, "options": spec["options"]})
    except ValueError as exc:
        raise CliError(str(exc)) from None


def open_loop(args: argparse.Namespace, sides: dict) -> tuple[dict, str]:
    """The paired open-loop comparison of ``sides`` (``compare.run_compare``'s)."""
    from wamdiff2_core.evaluation.comparison import compare_records, format_open

    records, image_root = _records(args)
    items = {side: _items(args, side, spec, records, image_root)
             for side, spec in sides.items()}
    names = (sides["a"]["name"], sides["b"]["name"])
    report = compare_records(records, items["a"], items["b"], image_root, names)
    report["info"] = {"mode": "open-loop", "data": args.data,
                      "a": {"spec": sides["a"]["spec"], "options": sides["a"]["options"]},
                      "b": {"spec": sides["b"]["spec"], "options": sides["b"]["options"]}}
    return report, format_open(report)
