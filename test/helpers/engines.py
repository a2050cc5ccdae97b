"""One decode on an engine of its own, for tests that compare decoders call by call (an
owner keeps its engine across calls instead: ``decoding.engine.DecodingEngine``)."""
from __future__ import annotations

from wamdiff2_core.decoding.config import DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.output import DecodeOutput


def fast_decode(model, batch: dict, cfg: DecodeConfig = DecodeConfig(),
                fast: FastConfig = FastConfig(), language=None) -> DecodeOutput:
    """``batch`` decoded by the fast decoder of a fresh engine (its states built anew)."""
    return DecodingEngine(model, "fast", fast).decode(batch, cfg, language)
