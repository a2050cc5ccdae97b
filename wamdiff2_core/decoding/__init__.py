"""Decoding: the reference block-diffusion and AR decoders, commit rules, the fast decoder,
and the engine that owns their state (``engine.DecodingEngine``)."""
from wamdiff2_core.decoding.cancel import DecodeCancelled
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig
from wamdiff2_core.decoding.output import DecodeStats

__all__ = ["COMMIT_RULES", "DecodeCancelled", "DecodeConfig", "DecodeStats"]
