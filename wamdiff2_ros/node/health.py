"""Input health: when each input last delivered, and which have been silent too long.

`InputHealth` is told when each input arrives (`seen`) and when planning starts and stops;
`silent` lists the inputs that have delivered nothing for longer than the timeout since the
later of the two, as /diagnostics conditions: a warning, then an error past a second limit.
Times are the monotonic clock: a silent camera is silent whatever the stamps or /clock say.
"""
from __future__ import annotations

import threading
import time

from wamdiff2_ros.node.diagnostics import ERROR, WARN, Condition


class InputHealth:
    """Last arrival per input name (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        self._since: float | None = None          # monotonic start of planning; None: idle

    def start(self) -> None:
        """Planning starts (activate): silence counts from now."""
        with self._lock:
            self._since, self._seen = time.monotonic(), {}

    def stop(self) -> None:
        with self._lock:
            self._since = None

    def seen(self, name: str) -> None:
        with self._lock:
            self._seen[name] = time.monotonic()

    def silent(self, inputs: dict[str, str], timeout_s: float, error_s: float = 0.0
               ) -> list[Condition]:
        """A condition per input of `inputs` (name -> what to call it, e.g. its topic) that
        has been silent more than `timeout_s` while planning: WARN, ERROR once silent more
        than `error_s` (0: never ERROR); none when idle or `timeout_s` is 0."""
        now = time.monotonic()
        with self._lock:
            if self._since is None or timeout_s <= 0:
                return []
            last = {name: self._seen.get(name, self._since) for name in inputs}
            never = {name for name in inputs if name not in self._seen}
        out = []
        for name, label in inputs.items():
            silent_s = now - last[name]
            if silent_s > timeout_s:
                note = ", none since activation" if name in never else ""
                level = ERROR if 0 < error_s < silent_s else WARN
                limit = (f"input_timeout_error_s {error_s:g}" if level == ERROR else
                         f"input_timeout_s {timeout_s:g}")
                out.append((level, f"input_timeout: no message on {label} for "
                                   f"{silent_s:.1f} s{note} ({limit})"))
        return out
