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
    """The answers of one decoded batch, in the batch's row order."""
    sequences: list[list[int]]            # answer ids per row, end-of-answer excluded
    finished: list[bool]                  # row produced an end-of-answer token
    stats: DecodeStats = field(default_factory=DecodeStats)


def finish_rows(raw, eoa: int, stats: DecodeStats) -> DecodeOutput:
    """The output of generated ids ``raw`` (a (B, N) tensor): each row cut at its first
    end-of-answer token, whose tokens (it included) are counted into ``stats``."""
    seqs, done = [], []
    for row in raw.tolist():
        if eoa in row:
            cut = row.index(eoa)
            seqs.append(row[:cut])
            stats.tokens += cut + 1
            done.append(True)
        else:
            seqs.append(row)
            stats.tokens += len(row)
            done.append(False)
    return DecodeOutput(seqs, done, stats)
