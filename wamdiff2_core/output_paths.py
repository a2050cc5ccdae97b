"""Output paths checked before any work (data, runs, reports, predictions, bags): the one
definition of "this process can write there", :func:`check_output_path`. Commands call it
through ``wamdiff2_core.apps.outputs.check_output`` (one sentence, exit 2); the trainer's
recipe check can call it for ``output.dir``."""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


class OutputPathError(ValueError):
    """An output path this process cannot write as needed; the message is one sentence."""


def check_output_path(path: str | os.PathLike, flag: str, *, folder: bool) -> Path:
    """``path`` as a Path, once it is known that this process can write it: a folder
    (``folder`` True: it exists as one, or can be created) or a file (it can be created or
    replaced). ``flag`` names the option in the sentence (``--out``). Nothing is created: the
    nearest existing folder is tried with a temporary file that is removed at once.

    Raises:
        OutputPathError: the path (or a folder above it) is a file where a folder is
            needed, a folder or a device where a file is needed, a broken symbolic link or a
            link loop, or a place where nothing can be written (read-only, no permission,
            not a real folder).
    """
    path = Path(path)
    what = f"{flag} {path}"
    exists = _exists(path, what)
    if not exists and path.is_symlink():
        raise OutputPathError(f"{what} is a symbolic link to a missing target")
    if exists and folder and not path.is_dir():
        raise OutputPathError(f"{what} is a file, not a folder")
    if exists and not folder and path.is_dir():
        raise OutputPathError(f"{what} is a folder, not a file")
    if exists and not folder and not path.is_file():
        raise OutputPathError(f"{what} is not a regular file (a device, pipe or socket)")
    # The folder the output goes into (a folder output itself when it exists), or the
    # nearest existing folder above it: it must be a folder this process can write.
    base = path if exists and folder else path.parent
    while not _exists(base, what):
        base = base.parent
    if not base.is_dir():
        raise OutputPathError(f"{what} cannot be created: {base} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=base, prefix=".wamdiff2-write-check-"):
            pass
    except OSError as exc:
        where = "" if base == path else f" (in {base})"
        raise OutputPathError(f"{what} cannot be written{where}: {_reason(exc)}") from None
    if exists and not folder and not os.access(path, os.W_OK):
        raise OutputPathError(f"{what} cannot be written: permission denied")
    return path


def _exists(path: Path, what: str) -> bool:
    """Whether ``path`` exists (a file above it: it does not); OutputPathError when it cannot be
    looked at (a symbolic link loop, no permission)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise OutputPathError(f"{what} cannot be used: {_reason(exc)}") from None
    return True


def _reason(exc: OSError) -> str:
    """An OSError as a few words (``read-only file system``), never a traceback."""
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link loop"
    if exc.errno == errno.ENOENT:                  # /proc and the like: no files in there
        return "no file can be created there"
    return (exc.strerror or type(exc).__name__).lower()
