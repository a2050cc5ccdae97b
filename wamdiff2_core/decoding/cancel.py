"""Cooperative cancellation of a decode: a flag the decoders read between forward passes.

A caller that must get the model back by a deadline (the ROS node's scheduler) hands
``Planner.plan/answer/detect(..., cancel=flag)`` any object with ``is_set()`` (a
``threading.Event``); the planner opens ``cancel_scope(flag)`` around its decodes, and every
decoder loop calls ``check_cancel(stats)`` before each forward pass. Once the flag is set the
forward in flight finishes and the next one does not start: ``DecodeCancelled`` is raised
instead. The read is a Python attribute read on the host: no device synchronisation is added
to the GPU path (a flag set while CUDA graphs are queued stops the host from queueing more).

The flag travels in a context variable rather than through every decoder's signature: the
decoders stay as they are called elsewhere (bench, predict, the closed loop), where no scope
is open and ``check_cancel`` is one failed lookup.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Protocol


class CancelFlag(Protocol):
    """What a cancel flag needs: ``threading.Event`` is one."""

    def is_set(self) -> bool: ...


class DecodeCancelled(RuntimeError):
    """A decode stopped between forward passes because its cancel flag was set;
    ``forwards``: the forward passes it had run after the prefill."""

    def __init__(self, forwards: int = 0):
        super().__init__(f"decode cancelled after {forwards} forward pass(es)")
        self.forwards = forwards


_FLAG: ContextVar[CancelFlag | None] = ContextVar("wamdiff2_decode_cancel", default=None)


@contextmanager
def cancel_scope(flag: CancelFlag | None) -> Iterator[None]:
    """Decodes run inside this block stop at their next forward once ``flag`` is set (None:
    no flag, the enclosing scope's if any)."""
    if flag is None:
        yield
        return
    token = _FLAG.set(flag)
    try:
        yield
    finally:
        _FLAG.reset(token)


def check_cancel(forwards: int = 0) -> None:
    """Raise DecodeCancelled when the open scope's flag is set (``forwards``: how many forward
    passes ran, for the message); called by the decoders before each forward pass."""
    flag = _FLAG.get()
    if flag is not None and flag.is_set():
        raise DecodeCancelled(forwards)
