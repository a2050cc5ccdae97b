"""The public plain types: what goes into a planner and what comes out, and where the bundled
model is. Torch-free, so the ROS node, the simulator and the evaluation import them directly
(``wamdiff2_core.planner`` re-exports them next to ``Planner``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wamdiff2_core.decoding.config import DecodeStats

#: The trained default model shipped in the package (model card: its README.md).
BUNDLED = Path(__file__).resolve().parent / "assets" / "default_model"


def bundled_checkpoint_path() -> Path | None:
    """The trained default model shipped in the package, or None if this checkout has none."""
    return BUNDLED if (BUNDLED / "config.json").exists() else None


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


@dataclass
class DetectResult:
    detections: list                 # [tasks.Detection], pixel boxes of the first image
    text: str
    stats: DecodeStats = field(default_factory=DecodeStats)


@dataclass
class AnswerResult:
    text: str
    stats: DecodeStats = field(default_factory=DecodeStats)
