"""The one reader for every file a user hands the project: read within limits or refused in
one sentence.

A file a user names (records, parts, manifests, recipes, camera rigs, scorer weights,
checkpoint metadata) may be anything: a FIFO that blocks ``open`` forever, ``/dev/zero``
behind a symlink, a file that grows while it is read, ``"[" * 200000`` that overflows the
parser's stack, or a YAML alias bomb that expands to gigabytes. Every reader here

- resolves symlinks and accepts a regular file only, checked by ``stat`` before opening
  (a FIFO is never opened) and by ``fstat`` after opening with ``O_NONBLOCK`` (the path can
  change in between);
- caps the size twice: by ``stat`` and by reading at most ``max_bytes + 1`` bytes, so a
  device or a growing file is refused, never read whole;
- caps nesting before the parser sees the text (JSON: brackets outside strings are counted;
  YAML: the composer counts its depth), so deep nesting is a sentence, not RecursionError;
- refuses YAML aliases (no valid recipe, rig or parameter file of this project uses them,
  and they are what an alias bomb is made of) and caps the number of YAML nodes;
- refuses JSON's ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow a float
  (``1e400``) unless the caller asks for them (``allow_nonfinite=True``): a number in a
  user file is meant to be a number.

Errors are ``UserFileError`` (a ValueError) whose text is one sentence naming the file.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

KIB = 1 << 10
MIB = 1 << 20

DEFAULT_MAX_BYTES = 16 * MIB        # a recipe, rig, weights or metadata file is kilobytes
MAX_RECORDS_BYTES = 1024 * MIB      # a data set's records (JSON list or JSONL)
MAX_LINE_BYTES = 64 * MIB           # one JSONL line (one record)
DEFAULT_MAX_DEPTH = 64              # the deepest legitimate file here nests about 6 levels
MAX_YAML_NODES = 200_000            # a recipe or rig has hundreds
MAX_YAML_BYTES = 4 * MIB            # PyYAML's pure-Python parser takes seconds per MiB

# A JSON string (escapes included), so that brackets inside strings are not counted.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


class UserFileError(ValueError):
    """A user's file that cannot be used; ``str`` is one sentence naming the file and what
    is wrong with it."""

    def __init__(self, path: str | os.PathLike, what: str, problem: str) -> None:
        self.path = Path(path)
        self.what = what
        self.problem = problem
        super().__init__(f"{what} {path} {problem}")


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str | os.PathLike, what: str) -> Path:
    """``path`` with symlinks resolved, when it is an existing regular file.

    UserFileError (one sentence) for a missing file, a broken or looping symlink, a
    directory, FIFO, device or socket, or an unreadable path. Never opens the file.
    """
    if path is None or str(path) == "":
        raise UserFileError("''", what, "is an empty path")
    try:
        real = Path(path).resolve(strict=True)
        mode = real.stat().st_mode
    except FileNotFoundError:
        raise UserFileError(path, what, "does not exist") from None
    except PermissionError:
        raise UserFileError(path, what, "cannot be read: permission denied") from None
    except RuntimeError:                          # a symlink loop (Python < 3.13)
        raise UserFileError(path, what, "is a symlink loop") from None
    except OSError as exc:
        raise UserFileError(path, what, f"cannot be read ({exc.strerror or exc})") from None
    except ValueError:                            # a NUL byte in the path
        raise UserFileError(repr(str(path)), what, "is not a valid path") from None
    kind = _kind(mode)
    if kind is not None:
        shown = f" (it points to {real})" if str(real) != os.path.abspath(path) else ""
        raise UserFileError(path, what, f"is {kind}, not a regular file{shown}")
    return real


def _size(n: int) -> str:
    return f"{n / MIB:.1f} MiB" if n >= MIB else f"{n / KIB:.1f} KiB" if n >= KIB \
        else f"{n} bytes"


def read_bytes(path: str | os.PathLike, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The whole content of the regular file ``path``, at most ``max_bytes`` bytes.

    UserFileError for what ``check_regular`` refuses, a file larger than ``max_bytes``
    (by ``stat``, or found so while reading: it grew, or is a device after all), or an
    error while reading.
    """
    real = check_regular(path, what)
    too_big = f"is larger than the limit of {_size(max_bytes)}"
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat above, open does
        # not wait for a writer; fstat then refuses it.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise UserFileError(path, what, "cannot be read: permission denied") from None
    except OSError as exc:
        raise UserFileError(path, what, f"cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        kind = _kind(info.st_mode)
        if kind is not None:
            raise UserFileError(path, what, f"is {kind}, not a regular file")
        if info.st_size > max_bytes:
            raise UserFileError(path, what, f"is {_size(info.st_size)}, {too_big}")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(max_bytes + 1 - total, 8 * MIB))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise UserFileError(path, what, f"grew while it was read: it {too_big}")
        return b"".join(chunks)
    except OSError as exc:
        raise UserFileError(path, what, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _decode(data: bytes, path, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserFileError(path, what, f"is not UTF-8 text (byte {exc.start} cannot be "
                                        f"decoded)") from None


def read_text(path: str | os.PathLike, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped), within ``max_bytes``.
    UserFileError as ``read_bytes``, or when the bytes are not UTF-8."""
    return _decode(read_bytes(path, what, max_bytes), path, what)


def json_depth(data: bytes) -> int:
    """How deep the brackets of the JSON text ``data`` nest, strings not counted (an upper
    bound for text that is not valid JSON)."""
    if data.count(b"[") + data.count(b"{") <= 1:
        return data.count(b"[") + data.count(b"{")
    stripped = _JSON_STRING.sub(b"", data) if b'"' in data else data
    steps = _OPEN[np.frombuffer(stripped, dtype=np.uint8)]
    if steps.size == 0:
        return 0
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _check_depth(data: bytes, max_depth: int, path, what: str, where: str = "") -> None:
    if data.count(b"[") + data.count(b"{") <= max_depth:     # cannot nest deeper: no scan
        return
    depth = json_depth(data)
    if depth > max_depth:
        raise UserFileError(path, what, f"{where}nests {depth} levels deep, more than the "
                                        f"limit of {max_depth}")


class _BadNumber(ValueError):
    """A number JSON allows but a user file here may not hold."""


def _refuse_constant(name: str):
    raise _BadNumber(f"{name}, which is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {text[:40]}, which overflows a float")
    return value


def _parse_json(text: str, path, what: str, allow_nonfinite: bool, where: str = "") -> Any:
    hooks = {} if allow_nonfinite else {"parse_constant": _refuse_constant,
                                         "parse_float": _finite_float}
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        if where:
            raise UserFileError(path, what, f"{where}is not valid JSON ({exc.msg})") from None
        raise UserFileError(path, what, f"is not valid JSON (line {exc.lineno} column "
                                        f"{exc.colno}: {exc.msg})") from None
    except RecursionError:                       # a backstop: the depth check comes first
        raise UserFileError(path, what, f"{where}nests too deeply to parse") from None
    except _BadNumber as exc:
        raise UserFileError(path, what, f"{where}holds {exc}") from None
    except ValueError as exc:                    # an int of more than 4300 digits
        raise UserFileError(path, what, f"{where}holds a number that cannot be read "
                                        f"({exc})") from None


def read_json(path: str | os.PathLike, what: str, max_bytes: int = DEFAULT_MAX_BYTES,
              max_depth: int = DEFAULT_MAX_DEPTH, allow_nonfinite: bool = False) -> Any:
    """The JSON document in ``path``.

    UserFileError (one sentence naming the file) for what ``read_text`` refuses, nesting
    deeper than ``max_depth`` (checked before parsing), invalid JSON, or - unless
    ``allow_nonfinite`` - ``NaN``, ``Infinity`` or a number that overflows a float.
    """
    return parse_json(read_bytes(path, what, max_bytes), path, what, max_depth,
                      allow_nonfinite)


def parse_json(data: bytes, path, what: str, max_depth: int = DEFAULT_MAX_DEPTH,
               allow_nonfinite: bool = False) -> Any:
    """``data`` (read from ``path`` by the caller, e.g. a safetensors header) as JSON, with
    the limits and refusals of ``read_json``."""
    _check_depth(data, max_depth, path, what)
    return _parse_json(_decode(data, path, what), path, what, allow_nonfinite)


def check_json_file(path: str | os.PathLike, what: str, max_bytes: int = DEFAULT_MAX_BYTES,
                    max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Refuse, as ``read_json`` would, a file another library is about to parse (a FIFO,
    a device, a file over ``max_bytes``, nesting deeper than ``max_depth``), without
    parsing it here."""
    _check_depth(read_bytes(path, what, max_bytes), max_depth, path, what)


def _lines(data: bytes, path, what: str, max_line_bytes: int, max_depth: int,
           allow_nonfinite: bool) -> list:
    values = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"line {number} "
        if len(line) > max_line_bytes:
            raise UserFileError(path, what, f"{where}is {_size(len(line))}, longer than the "
                                            f"limit of {_size(max_line_bytes)}")
        _check_depth(line, max_depth, path, what, where)
        text = _decode(line, path, what)
        values.append(_parse_json(text, path, what, allow_nonfinite, where))
    return values


def read_json_lines(path: str | os.PathLike, what: str, max_bytes: int = MAX_RECORDS_BYTES,
                    max_line_bytes: int = MAX_LINE_BYTES, max_depth: int = DEFAULT_MAX_DEPTH,
                    allow_nonfinite: bool = False) -> list:
    """The values of a JSONL file, one JSON document per non-blank line.

    UserFileError as ``read_json``, naming the line: a line longer than
    ``max_line_bytes``, nested deeper than ``max_depth``, or not valid JSON.
    """
    data = read_bytes(path, what, max_bytes)
    return _lines(data, path, what, max_line_bytes, max_depth, allow_nonfinite)


def read_json_or_lines(path: str | os.PathLike, what: str, max_bytes: int = MAX_RECORDS_BYTES,
                       max_line_bytes: int = MAX_LINE_BYTES,
                       max_depth: int = DEFAULT_MAX_DEPTH,
                       allow_nonfinite: bool = False, with_format: bool = False):
    """The items of a JSON list file or of a JSONL file, as the reference's data format
    allows both: a file whose name does not end in ``.jsonl`` and whose text starts with
    ``[`` is one JSON list; any other is JSONL. A JSONL file of one line is a list of one.

    UserFileError as ``read_json`` / ``read_json_lines``; a ``[`` file that holds anything
    but a list is refused too. ``with_format``: ``(items, "list" | "lines")``.
    """
    data = read_bytes(path, what, max_bytes)
    if Path(path).suffix != ".jsonl" and data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        _check_depth(data, max_depth, path, what)
        items = _parse_json(_decode(data, path, what), path, what, allow_nonfinite)
        if not isinstance(items, list):           # '[1] [2]' and the like fail above
            raise UserFileError(path, what, "must hold a JSON list")
        return (items, "list") if with_format else items
    items = _lines(data, path, what, max_line_bytes, max_depth, allow_nonfinite)
    return (items, "lines") if with_format else items


def read_yaml(path: str | os.PathLike, what: str, max_bytes: int = MAX_YAML_BYTES,
              max_depth: int = DEFAULT_MAX_DEPTH, max_nodes: int = MAX_YAML_NODES) -> Any:
    """The YAML document in ``path``, read with the safe loader.

    UserFileError (one sentence naming the file) for what ``read_text`` refuses, an alias
    (``*name``: refused, so no alias bomb can grow), nesting deeper than ``max_depth``, more
    than ``max_nodes`` nodes, several documents, or invalid YAML.
    """
    text = read_text(path, what, max_bytes)
    return parse_yaml(text, path, what, max_depth, max_nodes)


def parse_yaml(text: str, path, what: str, max_depth: int = DEFAULT_MAX_DEPTH,
               max_nodes: int = MAX_YAML_NODES) -> Any:
    """``text`` (the content of ``path``, or a value given on a command line) as YAML, with
    the limits of ``read_yaml``."""
    loader = _LimitedLoader(text, max_depth, max_nodes)
    try:
        return loader.get_single_data()
    except _YamlRefused as exc:
        raise UserFileError(path, what, str(exc)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = (exc.problem or exc.context or "malformed").rstrip(".")
        raise UserFileError(path, what, f"is not valid YAML ({at}{problem})") from None
    except yaml.YAMLError as exc:
        raise UserFileError(path, what, f"is not valid YAML ({str(exc).splitlines()[0]})") \
            from None
    except RecursionError:                      # a backstop: the depth cap comes first
        raise UserFileError(path, what, "nests too deeply to parse") from None
    except (ValueError, OverflowError) as exc:  # an int of > 4300 digits, a bad date
        raise UserFileError(path, what, f"holds a value that cannot be read ({exc})") \
            from None
    finally:
        loader.dispose()


class _YamlRefused(Exception):
    """A limit the YAML composer hit: the message is the problem, without the file."""


class _LimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose composer refuses aliases and counts depth and nodes
    before any node is built, so neither a bomb nor deep nesting costs memory or stack."""

    def __init__(self, stream: str, max_depth: int, max_nodes: int) -> None:
        super().__init__(stream)
        self.max_depth, self.max_nodes = max_depth, max_nodes
        self.depth = self.nodes = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _YamlRefused(f"uses the alias *{event.anchor} (line "
                               f"{event.start_mark.line + 1}); YAML aliases are not "
                               f"accepted: write the value out")
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _YamlRefused(f"holds more than {self.max_nodes} values")
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                raise _YamlRefused(f"nests more than {self.max_depth} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
