"""What every `wamdiff2` command shares: the one-sentence user error, thread and decoding
options, the model-source options, and command groups (`eval`, `bench`, ...).

Decoding options are built from ``DecodeConfig`` itself: one spec per field, defaults shown
from the dataclass, commit-rule and backend choices from their registries' names. A new rule
or a changed default therefore appears in every command at once. Every option defaults to
None, meaning "not chosen": the ``DecodeConfig`` keeps None there, and the decoder settles it
(``decoding.config.resolve_decode``: a checkpoint's recorded rule applies unless the user
names a rule, threshold or step budget).
"""
from __future__ import annotations

import argparse
import errno
from dataclasses import dataclass, fields

from wamdiff2_core.decoding.config import (BACKENDS, COMMIT_RULES, DECODE_MODES, DEFAULT_BACKEND,
                                          DEFAULT_COMMIT_RULE, DEFAULT_DRAFT_STEPS,
                                          DEFAULT_THRESHOLD, DecodeConfig, ExactConfig)


class CliError(Exception):
    """A user-facing error: printed as one sentence, exit code 2."""


# ------------------------------------------------------------------------------ full disks
_STORAGE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                   errno.EFBIG: "file too large for the file system or the size limit"}
# How libraries that do not raise OSError say it (safetensors, sqlite3, tensorboard).
_STORAGE_TEXTS = ("no space left on device", "database or disk is full", "storagefull",
                  "disk quota exceeded")


def storage_exhausted(exc: BaseException | None) -> str | None:
    """What ran out, as a phrase naming the file where known, when ``exc`` or an exception it
    was raised from is a full disk, an exhausted quota or a file size limit; else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
            where = f" (writing {exc.filename})" if exc.filename else ""
            return _STORAGE_ERRNOS[exc.errno] + where
        if any(text in str(exc).lower() for text in _STORAGE_TEXTS):
            return "no space left on device"
        exc = exc.__cause__ or exc.__context__
    return None


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
    dest: str = ""        # the argparse name where the field's would clash (default: the field)

    @property
    def name(self) -> str:
        return self.dest or self.field


DECODE_OPTIONS: dict[str, DecodeOption] = {o.field: o for o in (
    DecodeOption("block_size", "--block-size", int, "answer block size"),
    DecodeOption("steps_per_block", "--steps-per-block", int,
                 "denoising step budget per block"),
    DecodeOption("threshold", "--threshold", float,
                 "confidence threshold of the dynamic, budget, leftmost and frontier rules"),
    DecodeOption("commit_rule", "--commit-rule", str,
                 "which masked positions a denoising step commits", COMMIT_RULES),
    DecodeOption("max_new_tokens", "--max-new-tokens", int, "longest answer in tokens"),
    DecodeOption("constrained", "--constrained", bool,
                 "keep answers inside their task's language so that they always parse: "
                 "--no-constrained turns it off, --constrained also keeps free-text answers "
                 "non-blank"),
    DecodeOption("mode", "--decode-mode", str,
                 "diffusion: the model's own parallel decoding; exact: the diffusion model "
                 "drafts and its verifier (the checkpoint's AR teacher, else the model read "
                 "token by token) checks, so the answers are the verifier's greedy answers",
                 DECODE_MODES, dest="decode_mode"),     # `bench decode --mode`: execution
)}
_DEFAULT_TEXT = {"block_size": "the checkpoint's", "steps_per_block": "the block size",
                 "constrained": "plans, detections and closed-set answers",
                 "commit_rule": "the rule the checkpoint records, when no threshold or step "
                                f"budget is given either; else {DEFAULT_COMMIT_RULE}",
                 "threshold": "the checkpoint's with its rule, when no rule or step budget "
                              f"is given either; else {DEFAULT_THRESHOLD}"}


def _default_text(name: str) -> str:
    value = {f.name: f.default for f in fields(DecodeConfig)}[name]
    return _DEFAULT_TEXT.get(name, "{value}").format(value=value)


def add_decode_options(parser: argparse.ArgumentParser, knobs: tuple[str, ...],
                       flags: dict[str, str] | None = None,
                       defaults: dict[str, str] | None = None) -> None:
    """Add the options of the ``DecodeConfig`` fields ``knobs`` (keys of DECODE_OPTIONS);
    ``flags`` renames an option's flag for one command (e.g. ``--steps``), ``defaults`` says
    what leaving an option out means there, where that differs."""
    flags, defaults = flags or {}, defaults or {}
    for name in knobs:
        o = DECODE_OPTIONS[name]
        text = f"{o.help} (default: {defaults.get(name) or _default_text(name)})"
        if o.type is bool:                            # --x / --no-x; None: not given
            parser.add_argument(flags.get(name, o.flag), dest=o.name, default=None,
                                action=argparse.BooleanOptionalAction, help=text)
        else:
            parser.add_argument(flags.get(name, o.flag), dest=o.name, type=o.type,
                                default=None, choices=o.choices, help=text)


def decode_knobs(args: argparse.Namespace) -> dict:
    """The decoding options the user set (DecodeConfig field -> value)."""
    return {name: getattr(args, o.name) for name, o in DECODE_OPTIONS.items()
            if getattr(args, o.name, None) is not None}


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
# Diffusion fields a checkpoint may not state (a plain Qwen3-VL directory states none; its
# vocabulary supplies the reference's conventions): field -> (flag, type, choices, help).
# `--block-size` (a decoding option) supplies the block size. docs/model.md, "Loading".
FIELD_OPTIONS: dict[str, tuple[str, type, tuple[str, ...] | None, str]] = {
    "paradigm": ("--paradigm", str, ("ar", "diffusion"),
                 "how the checkpoint decodes: ar (next token) or diffusion (blocks)"),
    "mask_token_id": ("--mask-token-id", int, None, "id of the diffusion mask token"),
    "eoa_token_id": ("--eoa-token-id", int, None, "id of the end-of-answer token"),
    "pad_token_id": ("--pad-token-id", int, None, "id of the prompt padding token"),
}


def add_field_options(parser: argparse.ArgumentParser) -> None:
    """--paradigm, --mask-token-id, --eoa-token-id, --pad-token-id: diffusion fields for a
    checkpoint that does not state them (or to replace its own)."""
    group = parser.add_argument_group(
        "checkpoint fields", "for a checkpoint that does not state them (default: the "
                             "checkpoint's own, else the Qwen3-VL conventions for a Qwen "
                             "vocabulary; see docs/model.md)")
    for name, (flag, kind, choices, text) in FIELD_OPTIONS.items():
        group.add_argument(flag, dest=name, type=kind, default=None, choices=choices,
                           help=f"{text} (default: the checkpoint's)")


def field_overrides(args: argparse.Namespace, block_size: bool = True) -> dict:
    """The diffusion fields the user set (``block_size``: also --block-size, which then
    supplies a checkpoint's missing block size as well as the decoding block size)."""
    out = {name: getattr(args, name) for name in FIELD_OPTIONS
           if getattr(args, name, None) is not None}
    if block_size and getattr(args, "block_size", None) is not None:
        out["block_size"] = args.block_size
    return out


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--checkpoint / --preset / --device / --dtype, the decoding knobs, --backend and the
    checkpoint-field options (shared by commands that load a planner)."""
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR",
                     help="checkpoint directory (default: the bundled model)")
    src.add_argument("--preset", metavar="NAME",
                     help="an untrained model of a named shape (tiny, small, qwen3-vl-2b, ...)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: float32)")
    add_decode_options(parser, ("block_size", "steps_per_block", "threshold", "commit_rule",
                                "constrained", "mode"), flags={"steps_per_block": "--steps"})
    add_backend_option(parser)
    add_field_options(parser)


def add_exact_options(parser: argparse.ArgumentParser) -> None:
    """--verifier DIR|self and --draft-steps N: exact mode's verifier and draft budget (they
    matter with --decode-mode exact; ``exact_settings`` reads them, ``planner_config``
    passes them on), for the commands whose planner honours them."""
    parser.add_argument("--verifier", metavar="DIR|self", default=None,
                        help="exact mode's verifier, whose greedy answers it returns: a "
                             "next-token checkpoint, or self (the model read token by token; "
                             "default: the checkpoint's ar_teacher/, else self)")
    parser.add_argument("--draft-steps", type=int, default=None, metavar="N",
                        help="exact mode's denoising steps per draft (default: "
                             f"{DEFAULT_DRAFT_STEPS})")


def exact_settings(args: argparse.Namespace) -> dict:
    """The ``PlannerConfig`` fields of --verifier and --draft-steps (``verifier``,
    ``exact``); an invalid value is one CliError."""
    verifier = getattr(args, "verifier", None)
    if verifier not in (None, "self"):
        check_model_source(verifier)
    try:
        return {"verifier": verifier,
                "exact": ExactConfig(draft_steps=getattr(args, "draft_steps", None))}
    except ValueError as exc:
        raise CliError(str(exc)) from None


def check_model_source(source) -> None:
    """A checkpoint directory's config and weight headers, checked before torch is imported
    (seconds of start-up): a bad checkpoint is one CliError at once."""
    from wamdiff2_core.model.checkpoint import CheckpointError, check_source

    try:
        check_source(source)
    except CheckpointError as exc:
        raise CliError(str(exc)) from None


def planner_config(args: argparse.Namespace, decode: DecodeConfig | None = None,
                   **candidates):
    """The ``PlannerConfig`` of the shared model options: ``decode`` (default: from the
    decoding options), --backend, exact mode's --verifier / --draft-steps, and
    ``candidates`` (``candidate_options.candidate_settings``); an invalid value or
    combination is one CliError."""
    from wamdiff2_core.planner_config import PlannerConfig

    decode = decode or decode_config(args)
    try:
        return PlannerConfig(decode, backend=getattr(args, "backend", None), **candidates,
                             **exact_settings(args))
    except ValueError as exc:
        raise CliError(str(exc)) from None


def planner_from_args(args: argparse.Namespace, decode: DecodeConfig | None = None,
                      **candidates):
    """A Planner from the shared model arguments, with ``planner_config(args, decode,
    **candidates)``; any loading problem becomes one CliError."""
    config = planner_config(args, decode, **candidates)
    check_model_source(args.checkpoint)
    from wamdiff2_core.decoding.constraints.automaton import LanguageError
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.planner import Planner

    try:
        return Planner.from_pretrained(args.checkpoint or args.preset, config,
                                       device=args.device, dtype=args.dtype,
                                       fields=field_overrides(args))
    except LanguageError as exc:
        raise CliError(language_hint(exc)) from None
    except (CheckpointError, ValueError) as exc:
        raise CliError(str(exc)) from None


def language_hint(exc: Exception) -> str:
    """A constrained-decoding budget error as the command line's sentence: what to change."""
    return f"{exc}; raise --max-new-tokens or pass --no-constrained"


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


#: The help of every `--cameras RIG` option (data generate, closed loop, record-sim, bench).
CAMERAS_HELP = ("camera rig: a rig file (YAML: cameras: [{name, yaw_deg, hfov_deg, mount_x, "
                "...}], docs/simulation.md) or standard names, e.g. front,left "
                "(front, front_left, front_right, left, right, rear); cameras that set no "
                "resolution or field of view take --resolution / --hfov (default: front)")


def rig_arg(cameras: str | None, resolution: str, hfov: float = 80.0):
    """A simulator ``CameraRig`` from `--cameras RIG` (None: the front camera alone) with
    `--resolution` / `--hfov` as every camera's defaults."""
    from wamdiff2_core.sim.camera import CameraRig, load_rig

    camera = camera_arg(resolution, hfov)
    if cameras is None:
        return CameraRig((camera,))
    try:
        return load_rig(cameras, camera)
    except ValueError as exc:
        raise CliError(str(exc)) from None


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
    "candidates": "the learned candidate scorer's training frames and fit",
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
