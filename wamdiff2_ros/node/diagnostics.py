"""Counters and latencies of the planning node, and the DiagnosticArray that reports them.

`NodeStats` is shared by the receiving callbacks and the planning worker (thread-safe).
Every problem increments a named counter and becomes the status message; the status level
is the worst of the problems of the last `window_s` seconds and of the standing conditions
the node passes in (its lifecycle state, silent inputs: `InputHealth`); OK only when there
is none of either.
"""
from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
_RANK = {OK: 0, WARN: 1, ERROR: 2}

# Counters every report carries (zero until they happen), in this order.
COUNTERS = ("frames_received", "odometry_received", "frames_planned", "paths_published",
            "fallback_paths", "dropped_frames", "stale_frames", "future_frames",
            "camera_missing", "camera_late",
            "parse_failures", "model_errors", "plan_timeouts", "path_gaps", "bad_input",
            "questions_answered", "questions_refused", "answer_failures")

#: Lifecycle state -> the level it stands for (only `active` plans; a failed configure and
#: `finalized` will not plan until someone acts).
STATE_LEVELS = {"active": OK, "unconfigured": WARN, "configuring": WARN, "inactive": WARN,
                "finalized": ERROR}
MAX_MESSAGE_CHARS = 400          # a status message is a sentence, never a copied payload

Condition = tuple[bytes, str]    # (level, message) that holds for as long as it is reported


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
    configure_error: str | None = None         # set by a failed configure, until one works
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
            self._problems.append(_Problem(level, f"{kind}: {message}"[:MAX_MESSAGE_CHARS],
                                           time.monotonic()))

    def planned(self, stamp: float, latency_ms: float, planner_ms: float | None,
                tokens_per_forward: float | None) -> None:
        """Record one frame that got its outputs (whatever their source; `planner_ms` is None
        when the model did not run, tokens per forward when a malformed answer came without
        decoding statistics)."""
        with self._lock:
            self.last_frame_stamp = stamp
            self.latencies_ms.append(latency_ms)
            if planner_ms is not None:
                self.planner_ms.append(planner_ms)
            if tokens_per_forward is not None:
                self.tokens_per_forward.append(tokens_per_forward)

    def state_condition(self) -> Condition | None:
        """The lifecycle state as a condition: None when active, else its level and why."""
        if self.configure_error is not None:
            return ERROR, f"configure failed: {self.configure_error}"[:MAX_MESSAGE_CHARS]
        level = STATE_LEVELS.get(self.state, WARN)
        return None if level == OK else (level, f"not planning: the node is {self.state}")

    def level_and_message(self, conditions: list[Condition] = ()) -> tuple[bytes, str]:
        """The worst level among the standing conditions (the lifecycle state first) and
        the problems in the window; the message: the conditions', then the newest problem's,
        or the state when there is neither."""
        now = time.monotonic()
        with self._lock:
            recent = [p for p in self._problems if now - p.at <= self.window_s]
        state = self.state_condition()
        standing = ([state] if state else []) + list(conditions)
        levels = [level for level, _ in standing] + [p.level for p in recent]
        if not levels:
            return OK, self.state
        messages = [message for _, message in standing] + ([recent[-1].message] if recent
                                                            else [])
        return max(levels, key=lambda lv: _RANK[lv]), "; ".join(messages)[:MAX_MESSAGE_CHARS]

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
                     level: bytes | None = None, message: str | None = None,
                     conditions: list[Condition] = ()) -> DiagnosticArray:
    """One DiagnosticArray with the node's status; `level`/`message` override the summary
    (a problem reported at once: its own level, raised to the standing conditions' and the
    lifecycle state's when they are worse; earlier problems do not change it)."""
    summary_level, summary_message = stats.level_and_message(conditions)
    if level is not None:
        state = stats.state_condition()
        standing = [lv for lv, _ in ([state] if state else []) + list(conditions)]
        level = max([level, *standing], key=lambda lv: _RANK[lv])
    status = DiagnosticStatus(
        level=summary_level if level is None else level,
        name=name, hardware_id=hardware_id,
        message=(summary_message if message is None else message)[:MAX_MESSAGE_CHARS],
        values=stats.values())
    return DiagnosticArray(header=Header(stamp=stamp), status=[status])


class Reporter:
    """Counts each problem, logs it (throttled: `log`, a ThrottledLog) and publishes
    /diagnostics at once; `build(level, message)` makes the node's DiagnosticArray."""

    def __init__(self, publisher, stats: NodeStats, log,
                 build: Callable[[bytes | None, str | None], DiagnosticArray]):
        self._publisher, self.stats, self.log, self._build = publisher, stats, log, build

    def report(self, level: bytes | None = None, message: str | None = None) -> None:
        """Publish the node's DiagnosticArray now (the worst recent problem unless given)."""
        msg = self._build(level, message)
        try:
            self._publisher.publish(msg)
        except Exception:  # noqa: BLE001 - the context may be shutting down
            pass

    def problem(self, level: bytes, kind: str, message: str, bad_input: bool = False) -> None:
        """Count `kind` (and `bad_input`), log it and report it with its own level."""
        self.stats.problem(level, kind, message, bad_input=bad_input)
        self.log.at(level == ERROR, kind, f"dropped input: {message}" if bad_input
                    else message)
        self.report(level, f"{kind}: {message}")
