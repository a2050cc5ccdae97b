"""The `wamdiff2` command. Thin: each area registers its own subcommands.

Every module in SUBCOMMAND_MODULES exposes ``register(subparsers)``, which adds one or more
subcommands whose parsers carry ``func=callable(args) -> int``. Packages above the core (the
ROS tools) add theirs through the ``wamdiff2.subcommands`` entry-point group (setup.py), each
entry a ``register`` function, so the core never names them. The modules import only
argparse-level code at the top (torch, transformers and rclpy load when a command runs), so
``wamdiff2 --help`` stays fast; an area whose package is not installed is left out instead of
hiding every other subcommand.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys
from importlib.metadata import entry_points
from typing import NoReturn

from wamdiff2_core.apps.common import CliError, storage_exhausted
from wamdiff2_core.process_exit import run_main

SUBCOMMAND_MODULES = (
    "wamdiff2_core.apps.plan",           # plan
    "wamdiff2_core.apps.data",           # data generate
    "wamdiff2_core.apps.evaluate",       # eval open-loop / closed-loop
    "wamdiff2_core.apps.compare",        # eval compare
    "wamdiff2_core.apps.predict",        # predict
    "wamdiff2_core.apps.train",          # train, pipeline
    "wamdiff2_core.apps.bench.cli",      # bench decode
    "wamdiff2_core.apps.bench.predict",  # bench predict
    "wamdiff2_core.apps.bench.candidates",  # bench candidates
    "wamdiff2_core.apps.candidates",     # candidates collect / fit
)
#: The entry-point group through which other packages add subcommands (``register``).
SUBCOMMAND_GROUP = "wamdiff2.subcommands"


# What to do after a full disk stopped a command (by command; None: any other).
AFTER_FULL_DISK = {
    "train": "free some space, then --resume continues from the last complete checkpoint",
    "pipeline": "free some space, then --resume continues where it stopped",
    "data": "free some space, then --resume continues with the unfinished episodes",
    None: "free some space and run the command again",
}


#: What argparse takes for a negative number rather than an option: its own forms (-3, -.5,
#: -2.5) and also exponents and -inf/-nan, so `--acceleration 0 -1e300` reaches the command's
#: own check (one sentence) instead of failing as an unknown option.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$",
                             re.IGNORECASE)


def _accept_negative_numbers(parser: argparse.ArgumentParser) -> None:
    """NEGATIVE_NUMBER for `parser` and every subcommand below it (argparse keeps the pattern
    per parser)."""
    parser._negative_number_matcher = NEGATIVE_NUMBER
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _accept_negative_numbers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wamdiff2",
        description="WAM-Diff2: block-causal diffusion VLA planner (plan, data, eval, "
                    "train, bench, bag, demo).")
    sub = parser.add_subparsers(dest="wamdiff2_command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for entry in sorted(entry_points(group=SUBCOMMAND_GROUP), key=lambda e: e.name):
        try:
            register = entry.load()
        except ModuleNotFoundError as exc:
            if entry.module == exc.name or entry.module.startswith(f"{exc.name}."):
                continue  # its package is gone but its metadata is left (a stale install)
            raise
        register(sub)
    _accept_negative_numbers(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.wamdiff2_command is None else 2
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"wamdiff2 {args.wamdiff2_command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"wamdiff2 {args.wamdiff2_command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - only a full disk is answered here
        reason = storage_exhausted(exc)
        if reason is None:
            raise
        print(f"wamdiff2 {args.wamdiff2_command}: error: {reason}; nothing half-written was "
              f"kept ({AFTER_FULL_DISK.get(args.wamdiff2_command, AFTER_FULL_DISK[None])})",
              file=sys.stderr)
        return 1


def run() -> NoReturn:
    """The `wamdiff2` console script: `main`, then the process ends without module
    teardown (about a second after a model command's last line: process_exit)."""
    run_main(main)


if __name__ == "__main__":
    run()
