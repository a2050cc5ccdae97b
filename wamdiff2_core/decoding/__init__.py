"""Decoding: the reference block-diffusion and AR decoders, commit rules, the fast decoder."""
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig, DecodeStats

__all__ = ["COMMIT_RULES", "DecodeConfig", "DecodeStats"]
