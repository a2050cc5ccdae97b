"""A tiny hand-made data set in the generated format (docs/INTERFACES.md).

Imported by conftest.py (the `data_dir` fixture) and by tests that need the records.
"""
from __future__ import annotations

import json

import numpy as np
from PIL import Image

from wamdiff2_core.tasks import (
    Detection, conversation_record, detection_prompt, format_answer, format_detections,
    format_waypoints, planning_prompt, qa_prompt)

WIDTH, HEIGHT = 160, 90
TIMES = np.arange(1, 9) * 0.5                     # (8,) s


def straight(speed_mps: float, lateral_m: float = 0.0) -> np.ndarray:
    return np.stack([speed_mps * TIMES, np.full(8, lateral_m)], axis=1)      # (8, 2)


def _meta(episode: int, frame: int, **extra) -> dict:
    return {"episode": episode, "frame": frame, "scenario": "highway", "seed": episode,
            "image_size": [WIDTH, HEIGHT], **extra}


def _planning(id_: str, episode: int, speed: float, others: list[dict]) -> dict:
    image = f"images/{episode}_0.png"
    gt = straight(speed)
    record = conversation_record(id_, [image], planning_prompt("straight", (speed, 0.0)),
                                 format_waypoints(gt), "planning")
    record["meta"] = _meta(episode, 0, command="straight", velocity=[speed, 0.0],
                           acceleration=[0.0, 0.0], ego_future=gt.tolist(),
                           ego_size=[4.0, 2.0], others_future=others)
    return record


def _detection(id_: str, episode: int, boxes: list[list[float]]) -> dict:
    image = f"images/{episode}_0.png"
    dets = [Detection(tuple(b), "car") for b in boxes]
    record = conversation_record(id_, [image], detection_prompt(),
                                 format_detections(dets, WIDTH, HEIGHT), "detection")
    record["meta"] = _meta(episode, 0, boxes=[{"bbox": b, "label": "car", "id": i}
                                              for i, b in enumerate(boxes)])
    return record


def _qa(id_: str, episode: int, question: str, answer: str) -> dict:
    image = f"images/{episode}_0.png"
    record = conversation_record(id_, [image], qa_prompt(question), format_answer(answer), "qa")
    record["meta"] = _meta(episode, 0, question=question, answer=answer,
                           answer_set=["zero", "one", "two", "three"])
    return record


def make_records() -> list[dict]:
    next_lane = {"id": 11, "size": [4.5, 2.0],
                 "poses": [[x, 3.5, 0.0] for x in 10.0 * TIMES]}
    stopped_ahead = {"id": 12, "size": [4.0, 2.0], "poses": [[30.0, 0.0, 0.0]] * 8}
    return [
        _planning("p0", 0, 10.0, [next_lane]),        # expert at 10 m/s, car one lane left
        _planning("p1", 1, 5.0, [stopped_ahead]),     # expert stops short of x = 30 m
        _detection("d0", 0, [[10.0, 20.0, 50.0, 60.0], [80.0, 30.0, 120.0, 70.0]]),
        _detection("d1", 1, [[40.0, 10.0, 70.0, 40.0]]),
        _qa("q0", 0, "How many cars are ahead?", "two"),
        _qa("q1", 1, "How many cars are in the left lane?", "zero"),
    ]


def write_data_dir(root):
    """DIR/images/*.png + DIR/train.json + DIR/camera.json, as `data generate` writes."""
    (root / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for episode in (0, 1):
        pixels = rng.integers(0, 255, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{episode}_0.png")
    (root / "train.json").write_text(json.dumps(make_records()))
    (root / "camera.json").write_text(json.dumps(
        {"width": WIDTH, "height": HEIGHT, "fx": 80.0, "fy": 80.0, "cx": 80.0, "cy": 45.0,
         "mount": {}}))
    return root
