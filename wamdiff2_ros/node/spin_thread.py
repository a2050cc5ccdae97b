"""Work that must run on the thread that builds the executor's wait set.

rclpy's executors (Jazzy) build each wait set on the spinning thread: they list a node's
waitables, then enter each one. A subscription destroyed on another thread in between (an
executor thread running a QoS refresh or a lifecycle transition) has its QoS event handlers
destroyed too; rclpy skips the handler it could not enter but still adds it to the wait set,
and ``InvalidHandle: cannot use Destroyable because destruction was requested`` comes out of
``spin_once``: the node's process ends with a traceback (exit 1). The window is a few
microseconds, and a short GIL switch interval (``planner_node.GIL_SWITCH_INTERVAL_S``) makes
it far more likely: with 10 µs, a thread that creates and destroys a subscription with event
callbacks in a loop beside a spinning ``MultiThreadedExecutor`` crashes it within a second
(``docs/runs/spin_thread/race.py``).

``SpinThreadCalls`` runs such work on the spinning thread instead. ``planner_node.main``
binds it to its spinning thread and calls ``run_pending`` after every ``spin_once``; a call
made on another thread is queued, a guard condition wakes the spin, and the caller waits
for the result. Unbound (a node spun by someone else's executor) calls run where they are
made, as before.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable


class SpinThreadCalls:
    """Calls run on the thread bound with `bind` (see the module docstring).

    `wake()` makes the spinning thread's current `spin_once` return (a guard condition's
    `trigger`).
    """

    def __init__(self, wake: Callable[[], None]):
        self._wake = wake
        self._lock = threading.Lock()
        self._pending: deque[Callable[[], None]] = deque()
        self._owner: int | None = None

    @property
    def bound(self) -> bool:
        return self._owner is not None

    def bind(self) -> None:
        """From now on the calling thread (the one that spins) runs every call."""
        with self._lock:
            self._owner = threading.get_ident()

    def unbind(self) -> None:
        """Spinning has stopped: run what is queued here, then let calls run where they are
        made."""
        with self._lock:
            self._owner = None
        self.run_pending()

    def call(self, fn: Callable[[], Any], wait: bool = True, timeout_s: float = 30.0) -> Any:
        """Run `fn` on the spinning thread; with `wait`, block until it has run and return
        its result (or raise its exception; TimeoutError after `timeout_s`). Runs `fn` at
        once when no thread is bound or this is the bound thread."""
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def job() -> None:
            try:
                outcome["value"] = fn()
            except Exception as exc:  # noqa: BLE001 - handed to the waiting caller
                outcome["error"] = exc
            finally:
                done.set()

        with self._lock:
            direct = self._owner is None or self._owner == threading.get_ident()
            if not direct:
                self._pending.append(job)
        if direct:
            return fn()
        self._wake()
        if not wait:
            return None
        if not done.wait(timeout_s):
            raise TimeoutError(f"the spinning thread did not run {fn!r} within {timeout_s} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def run_pending(self) -> int:
        """Run the queued calls, oldest first (on the spinning thread); how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._pending:
                    return ran
                job = self._pending.popleft()
            job()
            ran += 1
