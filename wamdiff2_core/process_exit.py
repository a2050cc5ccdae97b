"""Ending a command's process without Python's module teardown.

A process that imported torch and transformers spends about a second after its last line
freeing modules that nothing will use again. `exit_process(code)` ends it at once, after
what a normal exit does that anyone could notice: the exit handlers run (``atexit``:
logging, temporary folders, multiprocessing, coverage), and Python's and C's output buffers
are flushed. Where a thread that is not a daemon still runs (a normal exit waits for it),
where the code is not a number, or where ``WAMDIFF2_FULL_EXIT=1`` asks for it, the process
exits the usual way.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from typing import NoReturn

FULL_EXIT_VARIABLE = "WAMDIFF2_FULL_EXIT"


def _threads_left() -> bool:
    """Whether a thread a normal exit would wait for is still running."""
    main = threading.main_thread()
    return any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate())


def _flush_everything() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):          # a closed pipe or stream: nothing to save
            pass
    try:
        ctypes.CDLL(None).fflush(None)         # C stdio (ROS's console logging, ...)
    except (OSError, AttributeError):
        pass


def exit_process(code: int | None) -> NoReturn:
    """End the process with `code` (None: 0), skipping module teardown where that is safe
    (module docstring)."""
    code = 0 if code is None else code
    if not isinstance(code, int) or isinstance(code, bool) or _threads_left() or \
            os.environ.get(FULL_EXIT_VARIABLE, "") not in ("", "0"):
        sys.exit(code)
    atexit._run_exitfuncs()
    _flush_everything()
    os._exit(code & 0xFF)


def run_main(main, *args) -> NoReturn:
    """Run a command's `main(*args)` and end the process with its code, as the console
    script would (SystemExit from inside it, argparse's included, gives its code)."""
    try:
        code = main(*args)
    except SystemExit as exc:
        code = exc.code
    exit_process(code)


__all__ = ["FULL_EXIT_VARIABLE", "exit_process", "run_main"]
