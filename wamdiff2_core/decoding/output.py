"""What a decode returns: the answers' token ids and what the call cost. Torch-free, so the
plain result types (``wamdiff2_core.types``) and the ROS layer import it directly."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class DecodeStats:
    """What one decode call cost. ``tokens`` counts answer tokens up to and including the
    end-of-answer token, over the batch; ``forwards`` counts decode forwards (denoising steps
    and commit passes; for AR one per token after the prefill)."""
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    tokens: int = 0
    forwards: int = 0
    denoise_forwards: int = 0
    blocks: int = 0
    batch: int = 1

    @property
    def total_ms(self) -> float:
        return self.prefill_ms + self.decode_ms

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / max(1, self.forwards)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(total_ms=self.total_ms, tokens_per_forward=self.tokens_per_forward)
        return d


@dataclass
class DecodeOutput:
    """The answers of one decoded batch, in the batch's row order. ``confidences`` (from
    the block-diffusion decoders; None from the others): per row, per answer token, the
    model's probability of the token at the step it was committed (over the answer
    language's tokens when constrained)."""
    sequences: list[list[int]]            # answer ids per row, end-of-answer excluded
    finished: list[bool]                  # row produced an end-of-answer token
    stats: DecodeStats = field(default_factory=DecodeStats)
    confidences: list[list[float]] | None = None     # cut as ``sequences``


def finish_rows(raw, eoa: int, stats: DecodeStats, confidences=None) -> DecodeOutput:
    """The output of generated ids ``raw`` (a (B, N) tensor): each row cut at its first
    end-of-answer token, whose tokens (it included) are counted into ``stats``;
    ``confidences`` (a (B, N) tensor, or None) cut with them."""
    seqs, done, cuts = [], [], []
    for row in raw.tolist():
        cut = row.index(eoa) if eoa in row else len(row)
        seqs.append(row[:cut])
        stats.tokens += min(cut + 1, len(row))
        done.append(cut < len(row))
        cuts.append(cut)
    conf = None if confidences is None else \
        [c[:cut] for c, cut in zip(confidences.tolist(), cuts)]
    return DecodeOutput(seqs, done, stats, conf)
