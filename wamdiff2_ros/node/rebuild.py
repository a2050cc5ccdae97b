"""Parameter changes that need a new planner, built and warmed beside the current one.

The set-parameters callback only validates; `PlannerBuilder.request` hands the build to a
thread of its own, which builds the next planner (sharing the weights) and warms it up in
the model lane's idle time: the warm-up's decodes carry a cancel flag that reads as set while
a frame waits or is planned, so a frame never waits for more than one warm-up forward pass
(a cancelled warm-up starts again once the lane is idle). When it is warm, `on_ready` swaps
it in: jobs that arrived before keep the planner they were given, later ones get the new
one. The warm-up runs here and not on the lane's thread: warming up on the thread that later
plans made every later plan on it several times slower on a CPU (docs/history.md,
2026-12-06). The newest request wins; a failed build leaves the current planner in place and
is reported through `on_failed`.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from wamdiff2_core.decoding.cancel import CancelFlag, DecodeCancelled, cancel_scope

#: Between two tries of a warm-up the lane was busy for (seconds).
IDLE_POLL_S = 0.02


class PlannerBuilder:
    """One thread that builds and warms planners on request, one at a time."""

    def __init__(self, busy: Callable[[], bool], on_ready: Callable[[Any, str], None],
                 on_failed: Callable[[str, BaseException], None]):
        self._busy, self._on_ready, self._on_failed = busy, on_ready, on_failed
        self._cond = threading.Condition()
        self._request: tuple[Callable[[], Any], str] | None = None
        self._working = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="wamdiff2-rebuild",
                                        daemon=True)
        self._thread.start()

    def request(self, build: Callable[[], Any], what: str) -> None:
        """Build `build()` (a planner), warm it up and hand it to `on_ready` with `what`
        (the change, in words); replaces a request not yet begun."""
        with self._cond:
            self._request = (build, what)
            self._cond.notify_all()

    def idle(self, timeout: float) -> bool:
        """Wait until no request is pending or being built; True if so within `timeout`."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._request is not None or self._working:
                if not self._cond.wait(max(0.0, end - time.monotonic())):
                    return self._request is None and not self._working
        return True

    def close(self, timeout: float = 60.0) -> bool:
        with self._cond:
            self._closed, self._request = True, None
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._request is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                (build, what), self._request = self._request, None
                self._working = True
            try:
                planner = build()
                self._warm(planner)
                self._on_ready(planner, what)
            except Exception as exc:  # noqa: BLE001 - reported; the old planner stays
                self._on_failed(what, exc)
            finally:
                with self._cond:
                    self._working = False
                    self._cond.notify_all()

    def _warm(self, planner) -> None:
        """`planner.warmup()` in the lane's idle time (see the module docstring)."""
        flag: CancelFlag = _Busy(self._busy)
        while not self._closed:
            while self._busy() and not self._closed:
                time.sleep(IDLE_POLL_S)
            try:
                with cancel_scope(flag):
                    planner.warmup()
                return
            except DecodeCancelled:
                continue


class _Busy:
    """A cancel flag that reads as set while `busy()` is true."""

    def __init__(self, busy: Callable[[], bool]):
        self.is_set = busy
