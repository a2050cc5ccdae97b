"""The decoder backends by name (``DecodeConfig``-level choice of how answers are decoded).

Each backend is ``decode(model, encoded_batch, DecodeConfig) -> DecodeOutput`` and decodes
with the paradigm the checkpoint was trained for (block diffusion or next-token). Both give
the same tokens (tests check it); "fast" is the default (``config.DEFAULT_BACKEND``).
"""
from __future__ import annotations

from typing import Callable

from wamdiff2_core.decoding import fast, reference
from wamdiff2_core.decoding.config import BACKENDS
from wamdiff2_core.decoding.reference import DecodeOutput

Decoder = Callable[..., DecodeOutput]          # (Wamdiff2Model, dict, DecodeConfig)

DECODER_BACKENDS: dict[str, Decoder] = {
    "fast": fast.fast_decode,
    "reference": reference.decode,
}
if tuple(DECODER_BACKENDS) != BACKENDS:        # the names are listed once, in config
    raise ImportError(f"decoder backends {tuple(DECODER_BACKENDS)} differ from "
                      f"decoding.config.BACKENDS {BACKENDS}")


def get_decoder(name: str) -> Decoder:
    """The backend called ``name``; a ValueError naming the known ones otherwise."""
    try:
        return DECODER_BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown decoder backend {name!r}; known: "
                         f"{', '.join(BACKENDS)}") from None

