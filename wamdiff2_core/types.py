"""The public plain types: what goes into a planner and what comes out, and where the bundled
model is. Torch-free, so the ROS node, the simulator and the evaluation import them directly
(``wamdiff2_core.planner`` re-exports them next to ``Planner``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wamdiff2_core.decoding.output import DecodeStats

#: The trained default model shipped in the package (model card: its README.md).
BUNDLED = Path(__file__).resolve().parent / "assets" / "default_model"


def bundled_checkpoint_path() -> Path | None:
    """The trained default model shipped in the package, or None if this checkout has none."""
    return BUNDLED if (BUNDLED / "config.json").exists() else None


class PromptTooLong(ValueError):
    """A prompt that, with the answer's token budget, needs more positions than the model has
    (``max_position_embeddings``): refused before anything is allocated for it."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, max_positions: int):
        super().__init__(f"the prompt has {prompt_tokens} tokens; with up to {max_new_tokens} "
                         f"answer tokens that exceeds the model's {max_positions} positions")
        self.prompt_tokens, self.max_new_tokens = prompt_tokens, max_new_tokens
        self.max_positions = max_positions


@dataclass
class Observation:
    """One planning input. Images: PIL images or (H, W, 3) uint8 RGB arrays. Velocity and
    acceleration in the ego frame (x forward, y left), m/s and m/s^2."""
    images: list
    command: str = "straight"
    velocity: tuple[float, float] = (0.0, 0.0)
    acceleration: tuple[float, float] = (0.0, 0.0)
    position: tuple[float, float] = (0.0, 0.0)
    stamp: object = None


@dataclass
class PlanResult:
    waypoints: np.ndarray            # (8, 2) metres, ego frame, t = 0.5 .. 4.0 s
    text: str
    stats: DecodeStats = field(default_factory=DecodeStats)
    # with K > 1 candidates: the frame's candidates.CandidateSet (the plan is its chosen one)
    candidates: object = None


@dataclass
class DetectResult:
    detections: list                 # [tasks.Detection], pixel boxes of the first image
    text: str
    stats: DecodeStats = field(default_factory=DecodeStats)
    dropped: int = 0                 # boxes left out for corners out of order (parse_model_detections)


@dataclass
class AnswerResult:
    text: str
    stats: DecodeStats = field(default_factory=DecodeStats)
