"""Decoding settings: what to decode (``DecodeConfig``, its commit rule settled by
``resolve_decode``), how the fast decoders run (``FastConfig``) and how exact mode drafts
and verifies (``ExactConfig``). Torch-free."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

# DecodeStats lives with the other output types; the ROS layer and the simulator import it
# from here.
from wamdiff2_core.decoding.output import DecodeStats  # noqa: F401

#: The commit rules' names: the one list. ``remasking.COMMIT_RULE_FNS`` holds the function of
#: each (it checks at import that it has exactly these), commands and node parameters offer
#: these choices.
COMMIT_RULES = ("low_confidence_dynamic", "low_confidence_static", "low_confidence_budget",
                "low_confidence_leftmost", "low_confidence_frontier", "sequential")
#: The decoder backends' names (``engine.DecodingEngine`` runs each). The default, "fast",
#: gives the reference decoder's tokens (tested token for token) in less time (CPU: eager
#: with a static cache; GPU: CUDA graphs).
BACKENDS = ("fast", "reference")
DEFAULT_BACKEND = "fast"
#: How answers are decoded (``DecodeConfig.mode``): "diffusion", the model's own decoding
#: (block diffusion; a next-token model token by token); "exact", the diffusion model drafts
#: and a next-token verifier checks, so the answers are the verifier's greedy answers
#: (``decoding.exact``; ``ExactConfig`` sets how, the engine holds the verifier).
DECODE_MODES = ("diffusion", "exact")
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
    never.

    ``mode``: one of ``DECODE_MODES``. In "exact" mode the answers are a verifier's greedy
    answers (the engine's: the checkpoint's AR teacher by default), drafted with the rule,
    threshold and block size here; the decode is greedy (``temperature`` 0)."""
    block_size: int | None = None
    steps_per_block: int | None = None
    threshold: float | None = None
    commit_rule: str | None = None
    temperature: float = 0.0
    max_new_tokens: int = 128
    seed: int = 0
    constrained: bool | None = None
    mode: str = "diffusion"

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
        if self.mode not in DECODE_MODES:
            raise ValueError(f"mode must be one of {DECODE_MODES}, got {self.mode!r}")
        if self.mode == "exact":
            check_exact(self)

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
        if self.mode == "exact":          # the draft budget is the engine's ExactConfig
            return f"exact (the verifier's greedy answers), drafts: {rule}{threshold}, " \
                   f"block size: {block}"
        return f"{rule}{threshold}, steps: {steps}, block size: {block}"


def check_exact(decode: DecodeConfig) -> None:
    """ValueError (one sentence) for settings exact decoding cannot honour: sampling. Run by
    ``DecodeConfig`` in exact mode and by the exact decoders, whatever mode they are given."""
    if decode.temperature > 0:
        raise ValueError("exact mode returns the verifier's greedy answers; it does not "
                         f"sample (temperature {decode.temperature:g} asked)")


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


@dataclass(frozen=True)
class FastConfig:
    """How the fast decoders run (the tokens never depend on it).

    mode: "auto" (CUDA graphs on a GPU, eager on a CPU) | "eager" | "compile" | "graphs" |
        "compile-graphs" (compiled, then captured; GPU).
    attention: "auto" (FlashInfer where installed on a GPU with a bf16/fp16 model, outside
        "compile" mode; else SDPA) | "sdpa" | "flashinfer".
    enforce_eager: debugging switch, overrides ``mode``.
    sync_every: denoising steps (AR: tokens) between two host checks of the done flags;
        None: 1 on a CPU (a check costs nothing there), 2 on a GPU.
    batch_buckets: batch sizes that states are built for (a batch is padded up to the next
        one; beyond the last, to the next multiple of it).
    pad_batch: pad batches up to their bucket; None: in every mode but "eager"
        (eager has no shapes to reuse).
    flashinfer_backend: FlashInfer's own kernel choice ("auto": FA3 on Hopper, else FA2).
    min_len / len_multiple: the static cache holds at least ``min_len`` slots per row and is
        rounded up to a multiple of ``len_multiple``; a longer request rebuilds the state.
    fuse_commit: commit a finished block in the first denoising step of the next one (one
        forward of both blocks) instead of a separate commit pass: one forward fewer per
        block, the same tokens. False: the reference's separate commit pass.
    """
    mode: str = "auto"
    attention: str = "auto"
    enforce_eager: bool = False
    sync_every: int | None = None
    batch_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    pad_batch: bool | None = None
    flashinfer_backend: str = "auto"
    min_len: int = 0
    len_multiple: int = 128
    fuse_commit: bool = True

    def __post_init__(self):
        if self.sync_every is not None and self.sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {self.sync_every}")
        if not self.batch_buckets or sorted(self.batch_buckets) != list(self.batch_buckets):
            raise ValueError("batch_buckets must be a non-empty increasing tuple")
        if self.len_multiple < 1:
            raise ValueError(f"len_multiple must be >= 1, got {self.len_multiple}")


#: Exact mode's settings where the caller leaves them None (``ExactConfig``), chosen on
#: validation frames (simulator seed 2000, judged on seed 3000; docs/decoding.md, "Exact
#: mode"): one denoising step per draft, a new draft once fewer than 4 drafted tokens are
#: left, 24 positions per verifier forward on a CPU (where a forward's cost grows with its
#: positions; elsewhere the whole block, which costs a GPU about one next-token step).
DEFAULT_DRAFT_STEPS = 1
DEFAULT_MIN_TAIL = 4
DEFAULT_CPU_VERIFY_WIDTH = 24


@dataclass(frozen=True)
class ExactConfig:
    """How exact mode (``DecodeConfig.mode == "exact"``) drafts and verifies. The answers
    never depend on it (they are the verifier's greedy answers, whatever the drafts); the
    speed does. None: the default.

    draft_steps: denoising steps the drafter spends on a block at most (the draft budget;
        the last step fills every position still masked).
    min_tail: a new block is drafted once a row still decoding has fewer than this many
        drafted tokens left after its position; until then each verify re-reads the rest
        of the last draft.
    verify_width: positions one verifier forward reads (at most the block size; None:
        ``DEFAULT_CPU_VERIFY_WIDTH`` on a CPU, the block size elsewhere). A verify accepts
        at most this many tokens.
    lookahead: after a verify, its choices past the accepted run (the verifier's guesses
        given the draft as it was) replace the draft there, for the next verify to read;
        False keeps the drafter's tokens there.
    """
    draft_steps: int | None = None
    min_tail: int | None = None
    verify_width: int | None = None
    lookahead: bool = True

    def __post_init__(self):
        if not isinstance(self.lookahead, bool):
            raise ValueError(f"lookahead must be true or false, got {self.lookahead!r}")
        for name in ("draft_steps", "min_tail", "verify_width"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    def resolved(self, block: int, device) -> "ExactConfig":
        """Every field set, for drafts of ``block`` positions on ``device`` (a torch device
        or its name)."""
        cpu = str(device).split(":")[0] == "cpu"
        width = self.verify_width or (DEFAULT_CPU_VERIFY_WIDTH if cpu else block)
        return ExactConfig(min(self.draft_steps or DEFAULT_DRAFT_STEPS, block),
                           self.min_tail or DEFAULT_MIN_TAIL, min(width, block),
                           self.lookahead)

    def summary(self) -> str:
        """One line, e.g. "draft steps: 1, redraft below 4 tokens, verify width: 24 on a CPU,
        the block elsewhere" (None fields as their defaults)."""
        width = self.verify_width or (f"{DEFAULT_CPU_VERIFY_WIDTH} on a CPU, the block "
                                      "elsewhere")
        return (f"draft steps: {self.draft_steps or DEFAULT_DRAFT_STEPS}, redraft below "
                f"{self.min_tail or DEFAULT_MIN_TAIL} tokens, verify width: {width}"
                + ("" if self.lookahead else ", no lookahead"))
