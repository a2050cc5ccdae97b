"""The `wamdiff2` command. Thin: each area registers its own subcommands.

Every module in SUBCOMMAND_MODULES exposes ``register(subparsers)``, which adds one or more
subcommands whose parsers carry ``func=callable(args) -> int``. Modules are imported only
when the command runs, so ``wamdiff2 --help`` stays fast and a broken optional area names
itself instead of hiding every other subcommand.
"""
from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = (
    "wamdiff2_core.cli_plan",          # plan
    "wamdiff2_core.sim.cli",           # data generate
    "wamdiff2_core.evaluation.cli",    # eval open-loop / closed-loop
    "wamdiff2_core.training.cli",      # train, pipeline
    "wamdiff2_core.decoding.cli",      # bench decode
    "wamdiff2_ros.cli",                # bench node
    "wamdiff2_ros.bag_cli",            # bag record-sim / replay / eval, demo
)


class CliError(Exception):
    """A user-facing error: printed as one sentence, exit code 2."""


def check_threads(threads: int | None) -> None:
    """A `--threads N` value: None (torch's default) or N >= 1; ValueError otherwise."""
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")


def apply_threads(threads: int | None) -> None:
    """`--threads N`: torch's CPU threads for this whole process (None: left as they are)."""
    check_threads(threads)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def decode_config(**knobs):
    """A ``DecodeConfig`` from command-line decoding knobs (a None knob keeps its default);
    an invalid value is one ``CliError``."""
    from wamdiff2_core.decoding.config import DecodeConfig

    try:
        return DecodeConfig(**{k: v for k, v in knobs.items() if v is not None})
    except ValueError as exc:
        raise CliError(str(exc)) from None


def subgroup(subparsers, name: str, help: str):
    """The sub-subparsers of command group `name` (e.g. `eval`, `bench`), created once.

    Several areas add commands to one group (`eval open-loop` and `eval closed-loop`), so the
    group is memoised on the top-level subparsers object as attribute `_wamdiff2_<name>`.
    """
    attr = f"_wamdiff2_{name}"
    group = getattr(subparsers, attr, None)
    if group is None:
        parser = subparsers.add_parser(name, help=help)
        group = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
        parser.set_defaults(func=lambda args, p=parser: p.print_help() or 2)
        setattr(subparsers, attr, group)
    return group


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
                continue  # area not built yet in this checkout
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
