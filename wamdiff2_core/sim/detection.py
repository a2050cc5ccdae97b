"""2-D detection ground truth from the id render pass.

A vehicle gets a box only where it is actually visible: the box is the tight pixel
rectangle of the vehicle's pixels in the id image (so it is occlusion-aware and already
clipped to the image), and it is dropped when narrower or lower than ``min_side_px`` or
covering fewer than ``min_pixels`` pixels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LABEL = "car"


@dataclass(frozen=True)
class DetectionConfig:
    """Thresholds below which a visible vehicle gets no box."""

    min_side_px: float = 4.0
    min_pixels: int = 12


@dataclass(frozen=True)
class GroundTruthBox:
    """One visible vehicle: pixel box (x1, y1, x2, y2), continuous coordinates."""

    id: int
    box: tuple[float, float, float, float]
    pixels: int
    label: str = LABEL

    def to_meta(self) -> dict:
        return {"bbox": [float(v) for v in self.box], "label": self.label, "id": self.id}


def boxes_from_ids(ids: np.ndarray, config: DetectionConfig = DetectionConfig()
                   ) -> list[GroundTruthBox]:
    """Boxes of the vehicles visible in an id image (H, W) (-1 = no vehicle), sorted left
    to right (then top to bottom, then by id)."""
    boxes = []
    for vehicle_id in np.unique(ids):
        if vehicle_id < 0:
            continue
        rows, cols = np.nonzero(ids == vehicle_id)
        x1, x2 = float(cols.min()), float(cols.max() + 1)
        y1, y2 = float(rows.min()), float(rows.max() + 1)
        if (x2 - x1 < config.min_side_px or y2 - y1 < config.min_side_px
                or len(rows) < config.min_pixels):
            continue
        boxes.append(GroundTruthBox(int(vehicle_id), (x1, y1, x2, y2), int(len(rows))))
    return sorted(boxes, key=lambda b: (b.box[0], b.box[1], b.id))
