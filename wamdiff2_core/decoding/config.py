"""Decoding knobs and per-call statistics."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

#: The commit rules' names: the one list. ``remasking.COMMIT_RULE_FNS`` holds the function of
#: each (it checks at import that it has exactly these), commands and node parameters offer
#: these choices.
COMMIT_RULES = ("low_confidence_dynamic", "low_confidence_static", "low_confidence_budget",
                "low_confidence_leftmost", "low_confidence_frontier", "sequential")
#: The decoder backends' names (``decoding.backends.DECODER_BACKENDS`` maps each to its
#: decoder). The default, "fast", gives the reference decoder's tokens (tested token for
#: token) in less time (CPU: eager with a static cache; GPU: CUDA graphs).
BACKENDS = ("fast", "reference")
DEFAULT_BACKEND = "fast"
#: The fields that choose a commit rule: a caller who sets one of them is not given the
#: checkpoint's recommended rule (``checkpoint_decode``).
RULE_FIELDS = ("commit_rule", "threshold", "steps_per_block")


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode. ``None`` block size / step budget mean: the checkpoint's block size and
    a budget of one step per position (the dynamic rule usually needs far fewer).

    ``constrained``: keep the answer inside its task's language, so that it always parses
    (``decoding.constraints``; the caller names the language). None (default): whenever
    the caller names one (the planner does for plans, detections and questions with a
    closed answer set); True: always (a free-text answer is then kept non-blank); False:
    never."""
    block_size: int | None = None
    steps_per_block: int | None = None
    threshold: float = 0.9
    commit_rule: str = "low_confidence_dynamic"
    temperature: float = 0.0
    max_new_tokens: int = 128
    seed: int = 0
    constrained: bool | None = None

    def __post_init__(self):
        if self.block_size is not None and not 1 <= self.block_size <= 256:
            raise ValueError(f"block_size must be in 1..256, got {self.block_size}")
        if self.steps_per_block is not None and self.steps_per_block < 1:
            raise ValueError(f"steps_per_block must be >= 1, got {self.steps_per_block}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.commit_rule not in COMMIT_RULES:
            raise ValueError(f"commit_rule must be one of {COMMIT_RULES}, "
                             f"got {self.commit_rule!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.constrained not in (None, True, False):
            raise ValueError(f"constrained must be None, True or False, got "
                             f"{self.constrained!r}")


    def to_dict(self) -> dict:
        return asdict(self)

    def chooses_rule(self) -> bool:
        """Whether this config sets the commit rule, threshold or step budget away from the
        defaults (a caller's choice, which a checkpoint's recommendation does not replace)."""
        return any(getattr(self, f) != getattr(DEFAULT_DECODE, f) for f in RULE_FIELDS)


DEFAULT_DECODE = DecodeConfig()


def checkpoint_decode(fields, decode: DecodeConfig) -> DecodeConfig:
    """``decode`` with the commit rule and threshold a checkpoint recommends
    (``DiffusionFields.decode_commit_rule`` / ``decode_threshold``); ``decode`` itself when
    the checkpoint recommends none, when ``decode`` already chooses a rule
    (``chooses_rule``) or for an AR model. ValueError naming a rule this project does not
    know."""
    rule = getattr(fields, "decode_commit_rule", "")
    if not rule or fields.paradigm != "diffusion" or decode.chooses_rule():
        return decode
    if rule not in COMMIT_RULES:
        raise ValueError(f"the checkpoint recommends the commit rule {rule!r}, which is "
                         f"not one of {', '.join(COMMIT_RULES)}")
    return replace(decode, commit_rule=rule,
                   threshold=fields.decode_threshold or decode.threshold)


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
