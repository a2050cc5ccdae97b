"""Wake the executor when a signal arrives, so that the main thread takes it at once.

CPython runs a signal's Python handler only in the main thread, between bytecodes; a main
thread that spins the executor waits inside rcl's wait set, in C, until some entity is
ready. `SignalWake` gives CPython a wake-up file descriptor (`signal.set_wakeup_fd`, written
on every signal) and a thread that reads it and calls `wake` (the executor's), so that the
wait returns and the handler runs (planner_node's raises KeyboardInterrupt).
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Callable


class SignalWake:
    """From construction until `close`, every signal calls `wake()` (main thread only)."""

    def __init__(self, wake: Callable[[], None]):
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write)
        self._wake = wake
        self._thread = threading.Thread(target=self._run, name="wamdiff2-signal-wake",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self._read, 64)
            except OSError:
                return
            if not data:                     # close(): the write end is gone
                return
            try:
                self._wake()
            except Exception:  # noqa: BLE001 - an executor shut down meanwhile
                return

    def close(self) -> None:
        """Stop waking; CPython's previous wake-up descriptor is restored."""
        signal.set_wakeup_fd(self._previous)
        os.close(self._write)
        self._thread.join(1.0)
        os.close(self._read)
