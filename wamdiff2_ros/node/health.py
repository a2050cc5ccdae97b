"""Input health: when each input last delivered, and which have been silent too long.

`InputHealth` is told when each input arrives (`seen`) and when planning starts and stops;
`silent` lists the inputs that have delivered nothing for longer than the timeout since the
later of the two, as /diagnostics conditions. Times are the monotonic clock: a silent camera
is silent whatever the stamps or /clock say.
"""
from __future__ import annotations

import threading
import time

from wamdiff2_ros.node.diagnostics import WARN, Condition


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

    def silent(self, inputs: dict[str, str], timeout_s: float) -> list[Condition]:
        """A WARN condition per input of `inputs` (name -> what to call it, e.g. its topic)
        that has been silent more than `timeout_s` while planning; none when idle or
        `timeout_s` is 0."""
        now = time.monotonic()
        with self._lock:
            if self._since is None or timeout_s <= 0:
                return []
            last = {name: self._seen.get(name, self._since) for name in inputs}
            never = {name for name in inputs if name not in self._seen}
        out = []
        for name, label in inputs.items():
            if now - last[name] > timeout_s:
                note = ", none since activation" if name in never else ""
                out.append((WARN, f"input_timeout: no message on {label} for "
                                  f"{now - last[name]:.1f} s{note} (input_timeout_s "
                                  f"{timeout_s:g})"))
        return out
