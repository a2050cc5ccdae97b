"""The `wamdiff2` command. Thin: each area registers its own subcommands.

Every module in SUBCOMMAND_MODULES exposes ``register(subparsers)``, which adds one or more
subcommands whose parsers carry ``func=callable(args) -> int``. The modules import only
argparse-level code at the top (torch, transformers and rclpy load when a command runs), so
``wamdiff2 --help`` stays fast; an area whose package is not installed (the ROS tools without
the ROS wheels) is left out instead of hiding every other subcommand.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from wamdiff2_core.apps.common import CliError

SUBCOMMAND_MODULES = (
    "wamdiff2_core.apps.plan",           # plan
    "wamdiff2_core.apps.data",           # data generate
    "wamdiff2_core.apps.evaluate",       # eval open-loop / closed-loop
    "wamdiff2_core.apps.train",          # train, pipeline
    "wamdiff2_core.apps.bench.cli",      # bench decode
    "wamdiff2_ros.tools.bench_cli",      # bench node
    "wamdiff2_ros.tools.bag_cli",        # bag record-sim / replay / eval / info, demo
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wamdiff2",
        description="WAM-Diff2: block-causal diffusion VLA planner (plan, data, eval, "
                    "train, bench, bag, demo).")
    sub = parser.add_subparsers(dest="wamdiff2_command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name or name.startswith(str(exc.name) + "."):
                continue  # area not installed in this environment
            raise
        module.register(sub)
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


if __name__ == "__main__":
    sys.exit(main())
