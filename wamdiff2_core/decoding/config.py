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
#: The rule and threshold a decode uses where the caller sets a rule, threshold or step
#: budget but leaves these two unset (``resolve_decode``).
DEFAULT_COMMIT_RULE = "low_confidence_dynamic"
DEFAULT_THRESHOLD = 0.9
#: The fields that choose a commit rule: a caller who sets any of them is not given the
#: checkpoint's recommended rule (``resolve_decode``).
RULE_FIELDS = ("commit_rule", "threshold", "steps_per_block")


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode. None means "not chosen": ``block_size`` None is the checkpoint's block
    size, ``steps_per_block`` None a budget of one step per position (the dynamic rule
    usually needs far fewer), and ``commit_rule`` / ``threshold`` None are settled by
    ``resolve_decode`` (the checkpoint's recommended rule when none of the three rule fields
    is set, else ``DEFAULT_COMMIT_RULE`` / ``DEFAULT_THRESHOLD``). Decoders resolve what
    they are given; a planner resolves once and says what it decodes with.

    ``constrained``: keep the answer inside its task's language, so that it always parses
    (``decoding.constraints``; the caller names the language). None (default): whenever
    the caller names one (the planner does for plans, detections and questions with a
    closed answer set); True: always (a free-text answer is then kept non-blank); False:
    never."""
    block_size: int | None = None
    steps_per_block: int | None = None
    threshold: float | None = None
    commit_rule: str | None = None
    temperature: float = 0.0
    max_new_tokens: int = 128
    seed: int = 0
    constrained: bool | None = None

    def __post_init__(self):
        if self.block_size is not None and not 1 <= self.block_size <= 256:
            raise ValueError(f"block_size must be in 1..256, got {self.block_size}")
        if self.steps_per_block is not None and self.steps_per_block < 1:
            raise ValueError(f"steps_per_block must be >= 1, got {self.steps_per_block}")
        if self.threshold is not None and not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.commit_rule is not None and self.commit_rule not in COMMIT_RULES:
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

    def summary(self) -> str:
        """One line saying how answers are decoded, e.g. "low_confidence_frontier at 0.95,
        steps: one per position, block size: the checkpoint's" (None fields as "not
        chosen")."""
        rule = self.commit_rule or "rule not chosen"
        threshold = f" at {self.threshold:g}" if self.threshold is not None else ""
        steps = self.steps_per_block or "one per position"
        block = self.block_size or "the checkpoint's"
        return f"{rule}{threshold}, steps: {steps}, block size: {block}"


#: Nothing chosen (importable until the ROS node's committed parameters stop naming it).
DEFAULT_DECODE = DecodeConfig()


def rule_chosen(decode: DecodeConfig) -> bool:
    """Whether ``decode`` sets a commit rule, threshold or step budget (any of them not None):
    the caller's choice, which a checkpoint's recommendation does not replace."""
    return any(getattr(decode, name) is not None for name in RULE_FIELDS)


def resolve_decode(decode: DecodeConfig, fields) -> DecodeConfig:
    """The settings a model with diffusion fields ``fields`` (``model.fields``; None: no
    checkpoint, so no recommendation) decodes ``decode`` with: the one place a commit rule
    is decided.

    Where ``decode`` chooses no rule (``rule_chosen`` False) and the checkpoint recommends
    one (``fields.decode_commit_rule``, a diffusion model), that rule and threshold;
    otherwise ``decode``'s own, ``DEFAULT_COMMIT_RULE`` / ``DEFAULT_THRESHOLD`` filling what
    it leaves None. The result always names a rule and a threshold, and resolving it again
    gives it back.

    Raises:
        ValueError: the checkpoint recommends a rule this project does not know.
    """
    rule = getattr(fields, "decode_commit_rule", "")
    if rule and fields.paradigm == "diffusion" and not rule_chosen(decode):
        if rule not in COMMIT_RULES:
            raise ValueError(f"the checkpoint recommends the commit rule {rule!r}, which is "
                             f"not one of {', '.join(COMMIT_RULES)}")
        return replace(decode, commit_rule=rule,
                       threshold=fields.decode_threshold or DEFAULT_THRESHOLD)
    return replace(decode, commit_rule=decode.commit_rule or DEFAULT_COMMIT_RULE,
                   threshold=(DEFAULT_THRESHOLD if decode.threshold is None
                              else decode.threshold))


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
