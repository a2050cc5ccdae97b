"""Throttled node logging: one line per kind of problem per period, with a count of the rest.

A camera sending 30 bad frames a second must not write 30 WARN lines a second. `ThrottledLog`
logs the first problem of a kind at once, then at most one line of that kind per
`period_s()` seconds, saying how many it left out. Each severity has a call site of its own:
rclpy's loggers refuse a call site whose severity changes between calls ("Logger severity
cannot be changed between calls"), which once turned a parse failure after a stale frame
into a lost diagnostic.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class ThrottledLog:
    """Wraps an rclpy (or `logging`) logger; `warn` / `error` are throttled per kind."""

    def __init__(self, logger, period_s: Callable[[], float]):
        self._logger = logger
        self._period_s = period_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}            # kind -> monotonic time of its last line
        self._left_out: dict[str, int] = {}          # kind -> lines not written since

    def _admit(self, kind: str) -> str | None:
        """The text to append if a line of `kind` may be written now, else None (counted)."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._period_s():
                self._left_out[kind] = self._left_out.get(kind, 0) + 1
                return None
            self._last[kind] = now
            left_out = self._left_out.pop(kind, 0)
        return f" ({left_out} more of this kind not logged)" if left_out else ""

    def warn(self, kind: str, message: str) -> None:
        """A WARN line `kind: message`, unless one of this kind was written recently."""
        suffix = self._admit(kind)
        if suffix is not None:
            self._logger.warning(f"{kind}: {message}{suffix}")

    def error(self, kind: str, message: str) -> None:
        """An ERROR line `kind: message`, unless one of this kind was written recently."""
        suffix = self._admit(kind)
        if suffix is not None:
            self._logger.error(f"{kind}: {message}{suffix}")

    def at(self, is_error: bool, kind: str, message: str) -> None:
        """`error` or `warn` (each its own call site, see the module docstring)."""
        if is_error:
            self.error(kind, message)
        else:
            self.warn(kind, message)

    def info(self, message: str) -> None:
        self._logger.info(message)

    def debug(self, message: str) -> None:
        self._logger.debug(message)


def clip(text: str, limit: int) -> str:
    """`text` quoted for a log or a diagnostic: its repr, cut to about `limit` characters,
    saying how long it was when cut."""
    quoted = repr(text)
    if len(quoted) <= limit:
        return quoted
    return f"{quoted[:max(1, limit - 1)]}… ({len(text)} characters)"
