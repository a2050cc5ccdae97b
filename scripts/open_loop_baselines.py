"""Open-loop figures of the two model-free planners, scored like `wamdiff2 eval open-loop`.

    python scripts/open_loop_baselines.py DATA [--every 2] [--json]

DATA is a data set directory (train.json) or a records file. The expert answers with the
recorded answers (L2 0; its collision rate is the data's own); constant velocity drives
straight ahead at the prompt's forward speed (`wamdiff2 eval closed-loop --planner
constant-velocity`, open loop) and answers no other task. ``--every K`` keeps the records
of every K-th frame (as the model card's open-loop figures do).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def constant_velocity_predictor():
    """Planning records: the constant-velocity plan of the prompt's speed, as answer text."""
    from wamdiff2_core import tasks

    def predict(record: dict, image) -> str:
        if record["task"] != "planning":
            return ""
        state = tasks.parse_planning_prompt(tasks.record_prompt_and_answer(record)[0])
        speed = max(float(state["velocity"][0]), 0.0)
        times = np.arange(1, 9) * 0.5
        return tasks.format_waypoints(np.stack([speed * times, np.zeros(8)], axis=1))
    return predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from wamdiff2_core.evaluation.open_loop import evaluate_open_loop
    from wamdiff2_core.evaluation.predictors import ground_truth_predictor

    path = Path(args.data)
    path = path / "train.json" if path.is_dir() else path
    records = [r for r in json.loads(path.read_text())
               if r["meta"]["frame"] % args.every == 0]
    for name, predict, recs in (
            ("expert (recorded answers)", ground_truth_predictor(), records),
            ("constant velocity", constant_velocity_predictor(),
             [r for r in records if r["task"] == "planning"])):
        report = evaluate_open_loop(recs, predict, path.parent, progress=False)
        print(f"== {name}")
        print(report.to_json() if args.json else report.summary())


if __name__ == "__main__":
    main()
