"""Output paths checked before a command does any work (data, runs, reports, predictions,
bags): :func:`check_output`, which every writing subcommand calls on each path it will
write, so a file where a folder is needed, a folder where a file is needed or a place this
process cannot write is one sentence and exit 2 at once, not a traceback after minutes of
work (the check itself: ``wamdiff2_core.output_paths``)."""
from __future__ import annotations

import os
from pathlib import Path

from wamdiff2_core.apps.common import CliError
from wamdiff2_core.output_paths import OutputPathError, check_output_path


def check_output(path: str | os.PathLike, flag: str, *, folder: bool) -> Path:
    """``path`` as a Path once it is known that this process can write it as a folder
    (``folder``) or a file; ``flag`` names the option (``--out``) in the sentence. Creates
    nothing. CliError (exit 2) otherwise: see ``output_paths.check_output_path``."""
    try:
        return check_output_path(path, flag, folder=folder)
    except OutputPathError as exc:
        raise CliError(str(exc)) from None
