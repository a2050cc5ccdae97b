"""The one exception the conversions raise for input the node must drop, never crash on."""
from __future__ import annotations


class BadInput(ValueError):
    """A message the node cannot use.

    `kind` is a short stable identifier (the diagnostics counter it increments, for example
    ``image_encoding`` or ``odometry_nonfinite``); the message says what was wrong in words.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
