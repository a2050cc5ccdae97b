"""How many candidate plans a planner decodes, how they are made diverse, and who picks one.

One frozen ``CandidateConfig``, checked once where it is built (command line, node
parameters, ``Planner``): ``k`` in ``1..MAX_K``, a known scorer and diversity source, a
temperature in range. ``k = 1`` is today's planner exactly: one greedy plan, no scorer.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from wamdiff2_core.tasks import COMMANDS

#: The most candidates one frame may decode (one batch of k rows of the same prompt).
MAX_K = 16
#: How the rows of the batch differ (row 0 is always the greedy plan for the given command,
#: today's K = 1 answer): ``sample``: the other rows sample at ``temperature``; ``commands``:
#: the next rows are greedy plans for the neighbouring navigation commands, the rest sample.
DIVERSITY = ("sample", "commands")
#: Run-time scorers (``candidates.scorers.SCORERS`` maps each name to its function; the
#: privileged oracle is not one of them: the closed loop alone has it).
SCORER_NAMES = ("confidence", "consensus", "rules", "learned")
#: Whose choice a simulated ego drives (``sim.candidate_planners``): the planner's scorer,
#: or, report-only, the privileged oracle or row 0 (greedy). Never a planner setting.
CHOICES = ("scorer", "oracle", "greedy")
#: The default scorer needs no weights file (the bundled model ships none) and stays closest
#: to the greedy plan: on held-out seeds the others left it in most frames and lowered the
#: closed-loop score (docs/candidates.md, "Measured").
DEFAULT_SCORER = "confidence"
DEFAULT_DIVERSITY = "sample"
DEFAULT_TEMPERATURE = 0.7
MAX_TEMPERATURE = 5.0


class CandidateConfigError(ValueError):
    """A candidate setting out of range; the message is one sentence with the reason."""


@dataclass(frozen=True)
class CandidateConfig:
    """``k`` plans per frame from one batched decode, ``diversity`` and ``temperature``
    making rows 1..k-1 differ from row 0 (the greedy plan), ``scorer`` choosing one."""

    k: int = 1
    scorer: str = DEFAULT_SCORER
    diversity: str = DEFAULT_DIVERSITY
    temperature: float = DEFAULT_TEMPERATURE
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or \
                not 1 <= self.k <= MAX_K:
            raise CandidateConfigError(f"candidates must be an integer in 1..{MAX_K}, got "
                                       f"{self.k!r}")
        if self.scorer not in SCORER_NAMES:
            raise CandidateConfigError(f"unknown candidate scorer {self.scorer!r}; use one of "
                                       f"{', '.join(SCORER_NAMES)}")
        if self.diversity not in DIVERSITY:
            raise CandidateConfigError(f"unknown candidate diversity {self.diversity!r}; use "
                                       f"one of {', '.join(DIVERSITY)}")
        if not 0.0 < self.temperature <= MAX_TEMPERATURE:
            raise CandidateConfigError(f"candidate temperature must be in (0, "
                                       f"{MAX_TEMPERATURE:g}], got {self.temperature!r}")

    @property
    def enabled(self) -> bool:
        """Whether this decodes more than today's one plan."""
        return self.k > 1

    def frame_seed(self, stamp: object = None) -> int:
        """The seed of one frame's candidate noise: ``seed`` itself for a frame without a
        stamp (None), else ``seed`` mixed with the stamp (seconds as a number, or a ROS time
        with ``sec`` and ``nanosec``) to the nanosecond: the same frame draws the same
        candidates on every run, two frames draw different noise."""
        if stamp is None:
            return self.seed
        if hasattr(stamp, "sec") and hasattr(stamp, "nanosec"):
            nanoseconds = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
        else:
            nanoseconds = round(float(stamp) * 1e9)
        digest = hashlib.blake2b(f"{self.seed}:{nanoseconds}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "little") >> 1     # a non-negative int64


@dataclass(frozen=True)
class Row:
    """One row of the candidate batch: the command its prompt states and its temperature
    (0: greedy)."""

    command: str
    temperature: float


def row_plan(config: CandidateConfig, command: str) -> tuple[Row, ...]:
    """The ``config.k`` rows for a frame whose navigation command is ``command``: row 0 the
    greedy plan for ``command``; then, with ``commands`` diversity, greedy plans for the
    other commands; the rest sampled for ``command``."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; expected one of {COMMANDS}")
    rows = [Row(command, 0.0)]
    if config.diversity == "commands":
        rows += [Row(other, 0.0) for other in COMMANDS if other != command]
    rows += [Row(command, config.temperature)] * config.k
    return tuple(rows[:config.k])
