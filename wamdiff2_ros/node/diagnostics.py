"""Counters and latencies of the planning node, and the DiagnosticArray that reports them.

`NodeStats` is shared by the receiving callbacks and the planning worker (thread-safe).
Every problem increments a named counter and becomes the status message; the status level
is the worst problem of the last `window_s` seconds (OK when there was none).
"""
from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
_RANK = {OK: 0, WARN: 1, ERROR: 2}

# Counters every report carries (zero until they happen), in this order.
COUNTERS = ("frames_received", "frames_planned", "paths_published", "dropped_frames",
            "stale_frames",
            "parse_failures", "model_errors", "bad_input", "questions_answered")


@dataclass
class _Problem:
    level: bytes
    message: str
    at: float


@dataclass
class NodeStats:
    """What the node has seen and done since it started."""

    window_s: float = 5.0
    counters: Counter = field(default_factory=Counter)
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=200))
    planner_ms: deque = field(default_factory=lambda: deque(maxlen=200))
    tokens_per_forward: deque = field(default_factory=lambda: deque(maxlen=200))
    state: str = "unconfigured"
    last_frame_stamp: float | None = None
    _problems: deque = field(default_factory=lambda: deque(maxlen=64))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def problem(self, level: bytes, kind: str, message: str, bad_input: bool = False) -> None:
        """Count `kind` (and `bad_input` when it was a bad message) and remember it."""
        with self._lock:
            self.counters[kind] += 1
            if bad_input:
                self.counters["bad_input"] += 1
            self._problems.append(_Problem(level, f"{kind}: {message}", time.monotonic()))

    def planned(self, stamp: float, latency_ms: float, planner_ms: float,
                tokens_per_forward: float | None) -> None:
        """Record one frame the planner finished (whatever its answer; tokens per forward
        are None when a malformed answer came without decoding statistics)."""
        with self._lock:
            self.last_frame_stamp = stamp
            self.latencies_ms.append(latency_ms)
            self.planner_ms.append(planner_ms)
            if tokens_per_forward is not None:
                self.tokens_per_forward.append(tokens_per_forward)

    def level_and_message(self) -> tuple[bytes, str]:
        """Worst problem in the window and the newest problem's message, or OK and state."""
        now = time.monotonic()
        with self._lock:
            recent = [p for p in self._problems if now - p.at <= self.window_s]
        if not recent:
            return OK, self.state
        worst = max(recent, key=lambda p: _RANK[p.level])
        return worst.level, recent[-1].message

    def values(self) -> list[KeyValue]:
        """Key/value pairs of the report: state, counters, latency percentiles."""
        with self._lock:
            counters = dict(self.counters)
            lat, plan, tpf = list(self.latencies_ms), list(self.planner_ms), \
                list(self.tokens_per_forward)
            stamp = self.last_frame_stamp
        kv = {"state": self.state}
        kv.update({name: str(counters.get(name, 0)) for name in COUNTERS})
        kv.update({name: str(n) for name, n in sorted(counters.items())
                   if name not in COUNTERS})
        for name, series in (("latency_ms", lat), ("planner_ms", plan)):
            if series:
                kv[f"{name}.last"] = f"{series[-1]:.1f}"
                kv[f"{name}.p50"] = f"{np.percentile(series, 50):.1f}"
                kv[f"{name}.p95"] = f"{np.percentile(series, 95):.1f}"
        if tpf:
            kv["tokens_per_forward"] = f"{np.mean(tpf):.2f}"
        kv["last_frame_stamp"] = "" if stamp is None else f"{stamp:.9f}"
        return [KeyValue(key=k, value=v) for k, v in kv.items()]


def diagnostic_array(stats: NodeStats, name: str, hardware_id: str, stamp,
                     level: bytes | None = None, message: str | None = None) -> DiagnosticArray:
    """One DiagnosticArray with the node's status; `level`/`message` override the summary."""
    summary_level, summary_message = stats.level_and_message()
    status = DiagnosticStatus(
        level=summary_level if level is None else level,
        name=name, hardware_id=hardware_id,
        message=summary_message if message is None else message,
        values=stats.values())
    return DiagnosticArray(header=Header(stamp=stamp), status=[status])
