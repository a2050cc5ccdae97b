"""Command-line parameter overrides (`-p name:=value`) checked against the declared types.

rcl merges `-p` overrides into the values of `--params-file` before the node sees any of
them, and an override whose type differs from the file's value (``-p
decode.max_new_tokens:=abc`` over the file's 128) is dropped there without a word: the node
would start with the file's value. So the node reads its own `--ros-args` and refuses such an
override at start-up, naming the parameter, as a run-time `ros2 param set` is refused.
"""
from __future__ import annotations

from typing import Any, Iterable

from wamdiff2_core.user_files import UserFileError, parse_yaml
from wamdiff2_ros.node.params import SPECS

_ROS_ARGS, _END = "--ros-args", "--"
_PARAM_FLAGS = ("-p", "--param")


def cli_overrides(argv: Iterable[str]) -> list[tuple[str, str]]:
    """(name, value text) of every `-p` / `--param` inside the `--ros-args` sections of
    `argv`, a `node:` prefix removed (every node of this process is this node)."""
    out, inside, args = [], False, list(argv)
    for i, arg in enumerate(args):
        if arg == _ROS_ARGS:
            inside = True
        elif arg == _END:
            inside = False
        elif inside and arg in _PARAM_FLAGS and i + 1 < len(args) and ":=" in args[i + 1]:
            name, value = args[i + 1].split(":=", 1)
            out.append((name.rpartition(":")[2], value))
    return out


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a floating-point number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list of strings" if all(isinstance(v, str) for v in value) else "a list"
    return type(value).__name__


def _same_type(default: Any, value: Any) -> bool:
    if isinstance(default, list):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(default, str):
        return True              # rcl reads a number given to a string parameter as text
    return type(value) is type(default)


def check_override_types(argv: Iterable[str]) -> None:
    """Raise ValueError naming the first `-p` override of a declared parameter whose value
    is not of the parameter's type (the type of its default)."""
    for name, text in cli_overrides(argv):
        spec = SPECS.get(name)
        if spec is None:
            continue
        try:
            value = parse_yaml(text, name, "parameter") if text else ""
        except UserFileError as exc:
            if not exc.problem.startswith("is not valid YAML"):
                raise ValueError(str(exc)) from None   # nesting or aliases past the limits
            value = text                              # rcl reads it as a string too
        if not _same_type(spec.default, value):
            raise ValueError(f"{name}: expects {_type_name(spec.default)}, got {text!r} "
                             f"({_type_name(value)}) from -p")
