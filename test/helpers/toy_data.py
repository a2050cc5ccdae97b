"""A small conversation data set written with numpy and PIL (no simulator needed).

Each frame is a grey road with one coloured box; its position decides the waypoints, the box
is the detection and the QA answer names its side, so a model can actually learn something.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from wamdiff2_core import tasks

W, H = 160, 96


def write_toy_data(root: str | Path, n_frames: int = 8, seed: int = 0) -> Path:
    """Write ``n_frames`` frames x (planning, detection, qa) records under ``root``."""
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n_frames):
        img = np.full((H, W, 3), 90, np.uint8)
        x1 = int(rng.integers(5, W - 45))
        y1 = int(rng.integers(30, H - 30))
        img[y1:y1 + 20, x1:x1 + 40] = (200, 30, 30)
        name = f"images/{i:04d}.png"
        Image.fromarray(img).save(root / name)
        side = "left" if x1 < W // 2 - 20 else "right"
        speed = float(rng.uniform(3, 15))
        lateral = (x1 - W / 2) / 40.0
        wp = np.stack([np.arange(1, 9) * speed * 0.5,
                       np.linspace(0, lateral, 8)], axis=-1)
        meta = {"episode": 0, "frame": i, "scenario": "toy", "seed": seed,
                "image_size": [W, H]}
        records.append(tasks.conversation_record(
            f"{i:04d}-plan", [name], tasks.planning_prompt(side, (speed, 0.0), (0.0, 0.0)),
            tasks.format_waypoints(wp), "planning") | {"meta": meta})
        det = [tasks.Detection((x1, y1, x1 + 40, y1 + 20), "car")]
        records.append(tasks.conversation_record(
            f"{i:04d}-det", [name], tasks.detection_prompt(),
            tasks.format_detections(det, W, H), "detection") | {"meta": meta})
        records.append(tasks.conversation_record(
            f"{i:04d}-qa", [name], tasks.qa_prompt("Which side is the car on?"),
            tasks.format_answer(side), "qa") | {"meta": meta})
    (root / "train.json").write_text(json.dumps(records, indent=1))
    return root
