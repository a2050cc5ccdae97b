"""What every `wamdiff2` command shares: the one-sentence user error, thread and decoding
options, the model-source options, and command groups (`eval`, `bench`, ...).

Decoding options are built from ``DecodeConfig`` itself: one spec per field, defaults shown
from the dataclass, commit-rule and backend choices from their registries' names. A new rule
or a changed default therefore appears in every command at once. Every option defaults to
None, meaning "keep DecodeConfig's value", so a command can tell which knobs a user set.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from wamdiff2_core.decoding.config import BACKENDS, COMMIT_RULES, DEFAULT_BACKEND, DecodeConfig


class CliError(Exception):
    """A user-facing error: printed as one sentence, exit code 2."""


# ------------------------------------------------------------------------------ threads
def check_threads(threads: int | None) -> None:
    """A `--threads N` value: None (torch's default) or N >= 1; ValueError otherwise."""
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")


def apply_threads(threads: int | None) -> None:
    """`--threads N`: torch's CPU threads for this whole process (None: left as they are)."""
    check_threads(threads)
    if threads is not None:
        import torch  # only when a command runs: --help stays torch-free

        torch.set_num_threads(threads)


# ------------------------------------------------------------------------------ decoding
@dataclass(frozen=True)
class DecodeOption:
    """One `DecodeConfig` field as a command-line option."""
    field: str
    flag: str
    type: type
    help: str
    choices: tuple[str, ...] | None = None


DECODE_OPTIONS: dict[str, DecodeOption] = {o.field: o for o in (
    DecodeOption("block_size", "--block-size", int, "answer block size"),
    DecodeOption("steps_per_block", "--steps-per-block", int,
                 "denoising step budget per block"),
    DecodeOption("threshold", "--threshold", float,
                 "confidence threshold of the dynamic, budget and leftmost rules"),
    DecodeOption("commit_rule", "--commit-rule", str,
                 "which masked positions a denoising step commits", COMMIT_RULES),
    DecodeOption("max_new_tokens", "--max-new-tokens", int, "longest answer in tokens"),
)}
_DEFAULT_TEXT = {"block_size": "the checkpoint's", "steps_per_block": "the block size"}


def _default_text(name: str) -> str:
    value = {f.name: f.default for f in fields(DecodeConfig)}[name]
    return _DEFAULT_TEXT.get(name, str(value))


def add_decode_options(parser: argparse.ArgumentParser, knobs: tuple[str, ...],
                       flags: dict[str, str] | None = None) -> None:
    """Add the options of the ``DecodeConfig`` fields ``knobs`` (keys of DECODE_OPTIONS);
    ``flags`` renames an option's flag for one command (e.g. ``--steps``)."""
    flags = flags or {}
    for name in knobs:
        o = DECODE_OPTIONS[name]
        parser.add_argument(flags.get(name, o.flag), dest=name, type=o.type, default=None,
                            choices=o.choices, help=f"{o.help} (default: {_default_text(name)})")


def decode_knobs(args: argparse.Namespace) -> dict:
    """The decoding options the user set (DecodeConfig field -> value)."""
    return {name: getattr(args, name) for name in DECODE_OPTIONS
            if getattr(args, name, None) is not None}


def decode_config(args: argparse.Namespace | None = None, **extra) -> DecodeConfig:
    """A ``DecodeConfig`` from the decoding options of ``args`` plus ``extra`` fields (None
    keeps the default); an invalid value is one ``CliError``."""
    knobs = decode_knobs(args) if args is not None else {}
    knobs.update({k: v for k, v in extra.items() if v is not None})
    try:
        return DecodeConfig(**knobs)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def add_backend_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default=DEFAULT_BACKEND, choices=list(BACKENDS),
                        help=f"decoder backend: {' | '.join(BACKENDS)} (same tokens; "
                             f"default: {DEFAULT_BACKEND})")


# ------------------------------------------------------------------------------ models
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--checkpoint / --preset / --device / --dtype, the decoding knobs and --backend (shared
    by commands that load a planner)."""
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR",
                     help="checkpoint directory (default: the bundled model)")
    src.add_argument("--preset", metavar="NAME",
                     help="an untrained model of a named shape (tiny, small, qwen3-vl-2b, ...)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: float32)")
    add_decode_options(parser, ("block_size", "steps_per_block", "threshold", "commit_rule"),
                       flags={"steps_per_block": "--steps"})
    add_backend_option(parser)


def planner_from_args(args: argparse.Namespace, decode: DecodeConfig | None = None):
    """A Planner from the shared model arguments (``decode``: default from the decoding
    options); any loading problem becomes one CliError."""
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.planner import Planner

    decode = decode or decode_config(args)
    try:
        return Planner.from_pretrained(args.checkpoint or args.preset, decode=decode,
                                       device=args.device, dtype=args.dtype,
                                       backend=args.backend)
    except (CheckpointError, ValueError) as exc:
        raise CliError(str(exc)) from None


# ------------------------------------------------------------------------------ simulator
def camera_arg(resolution: str, hfov: float = 80.0):
    """A simulator ``CameraConfig`` from `--resolution WxH` (and `--hfov`)."""
    from wamdiff2_core.sim.camera import CameraConfig, parse_resolution

    try:
        width, height = parse_resolution(resolution)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not 10.0 <= hfov <= 170.0:
        raise CliError(f"--hfov must be between 10 and 170 degrees, got {hfov}")
    return CameraConfig(width=width, height=height, hfov_deg=hfov)


def scenarios_arg(text: str) -> tuple[str, ...]:
    """Scenario families from a comma-separated `--scenarios` value."""
    from wamdiff2_core.sim.scenarios import parse_scenarios

    try:
        return parse_scenarios(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None


# ------------------------------------------------------------------------------ groups
GROUP_HELP = {
    "bench": "benchmarks (decode, node)",
    "bag": "record, replay and evaluate ROS 2 bags",
    "data": "generate training / evaluation data",
    "eval": "evaluate a planner (open loop, closed loop)",
}


def subgroup(subparsers, name: str):
    """The sub-subparsers of command group `name` (e.g. `eval`, `bench`), created once.

    Several modules add commands to one group (`eval open-loop` and `eval closed-loop`), so
    the group is memoised on the top-level subparsers object as `_wamdiff2_<name>`."""
    attr = f"_wamdiff2_{name}"
    group = getattr(subparsers, attr, None)
    if group is None:
        parser = subparsers.add_parser(name, help=GROUP_HELP[name])
        group = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
        parser.set_defaults(func=lambda args, p=parser: p.print_help() or 2)
        setattr(subparsers, attr, group)
    return group
