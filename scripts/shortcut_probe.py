"""Does a checkpoint plan bends from the image, or from the prompt's lateral ego status?

Two measurements on the planning records of a data set (optionally one scenario family):

1. **Plans with the lateral status as recorded, and zeroed.** Each frame is planned twice:
   with the prompt's velocity and acceleration as recorded, and with their lateral (y)
   components written as 0.00. The expert's lateral offset at 4 s is compared with the plan's
   (mean absolute error, correlation). A model that reads bends off the image plans them with
   the lateral status zeroed too; one that reads them off the status plans every frame
   straight.
2. **A linear probe of the vision tower** (``--probe-train DIR``): ridge regression from the
   merged visual tokens of DIR's frames to the expert's lateral offset at 4 s, scored (R^2)
   on the data set's frames. A high R^2 says the bend is in what the vision tower hands the
   language model, whatever the language model makes of it.

    python scripts/shortcut_probe.py CHECKPOINT DATA_DIR [--scenario racetrack] [--limit N] \\
        [--probe-train TRAIN_DIR --probe-limit 1500]

docs/training.md ("The ego-status shortcut") says what it shows; docs/history.md has its
figures.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

RIDGE_LAMBDAS = (10.0, 100.0, 1000.0)


def planning_records(root: Path, scenario: str | None, limit: int) -> list:
    """The planning records of ``root/train.json`` (of one scenario family if given), at
    most ``limit`` (0: all)."""
    records = [r for r in json.loads((root / "train.json").read_text())
               if r["task"] == "planning"
               and (scenario is None or r["meta"].get("scenario") == scenario)]
    return records[:limit] if limit else records


def lateral_at_4s(record) -> float:
    """The expert's lateral offset (m, left positive) at the last waypoint (4 s)."""
    from wamdiff2_core.tasks import parse_waypoints, record_prompt_and_answer

    return float(parse_waypoints(record_prompt_and_answer(record)[1])[-1, 1])


def _r2(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(1.0 - ((pred - truth) ** 2).mean() / max(((truth - truth.mean()) ** 2).mean(),
                                                           1e-12))


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() < 1e-9 or b.std() < 1e-9:
        return 0.0           # a constant plan carries nothing about the bend
    return float(np.corrcoef(a, b)[0, 1])


def plan_with_and_without_status(planner, root: Path, records: list) -> dict:
    """Lateral offsets at 4 s of the expert and of the planner's plans, with the lateral
    status as recorded and zeroed, and their errors."""
    from wamdiff2_core.evaluation.open_loop import load_image
    from wamdiff2_core.tasks import parse_planning_prompt, record_prompt_and_answer
    from wamdiff2_core.types import Observation

    truth, kept, zeroed, failed = [], [], [], 0
    for record in records:
        state = parse_planning_prompt(record_prompt_and_answer(record)[0])
        image = load_image(record, root)
        lateral = []
        for zero in (False, True):
            velocity, acceleration = state["velocity"], state["acceleration"]
            if zero:
                velocity, acceleration = (velocity[0], 0.0), (acceleration[0], 0.0)
            result = planner.plan(Observation(images=[image], command=state["command"],
                                              velocity=velocity, acceleration=acceleration,
                                              position=state["position"]))
            lateral.append(None if result.waypoints is None
                           else float(np.asarray(result.waypoints)[-1, 1]))
        if None in lateral:
            failed += 1
            continue
        truth.append(lateral_at_4s(record))
        kept.append(lateral[0])
        zeroed.append(lateral[1])
    truth_, out = np.array(truth), {"frames": len(truth), "unparsed": failed}
    out["expert_mean_abs"] = float(np.abs(truth_).mean()) if truth else None
    for name, values in (("as_recorded", kept), ("lateral_zeroed", zeroed)):
        pred = np.array(values)
        out[name] = ({"mean_abs_error": float(np.abs(pred - truth_).mean()),
                      "corr": _corr(pred, truth_), "mean_abs": float(np.abs(pred).mean())}
                     if truth else None)
    return out


def visual_features(model, root: Path, records: list) -> np.ndarray:
    """(N, tokens x width): each frame's merged visual tokens, flattened."""
    from wamdiff2_core.evaluation.open_loop import load_image
    from wamdiff2_core.tasks import detection_prompt

    tower, rows = model.hf.model.visual, []
    with torch.no_grad():
        for record in records:
            image = np.asarray(load_image(record, root))
            batch = model.processor.encode_prompts([detection_prompt()], [[image]])
            out = tower(batch["pixel_values"], grid_thw=batch["image_grid_thw"])
            out = out[0] if isinstance(out, tuple) else getattr(out, "pooler_output", out)
            rows.append(out.float().flatten().numpy())
    return np.stack(rows)


def ridge_r2(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
             test_y: np.ndarray, lam: float) -> float:
    """R^2 on the test set of a ridge regression fitted on standardised training features."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - mean) / std, (test_x - mean) / std
    # The dual form: N x N instead of features x features (N frames << features).
    alpha = np.linalg.solve(a @ a.T + lam * np.eye(len(a)), train_y - train_y.mean())
    return _r2(b @ (a.T @ alpha) + train_y.mean(), test_y)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("data", type=Path, help="generated data set directory")
    parser.add_argument("--scenario", default=None,
                        help="only this scenario family (highway, intersection, racetrack)")
    parser.add_argument("--limit", type=int, default=0, help="at most N frames (0: all)")
    parser.add_argument("--probe-train", type=Path, default=None,
                        help="data set to fit the linear probe on (none: no probe)")
    parser.add_argument("--probe-limit", type=int, default=1500,
                        help="frames of --probe-train, spread over it (default 1500)")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    args = parser.parse_args(argv)

    from wamdiff2_core.planner import Planner

    torch.set_num_threads(1)
    records = planning_records(args.data, args.scenario, args.limit)
    if len(records) < 2:
        parser.error(f"{args.data} has fewer than two planning records"
                     + (f" of scenario {args.scenario}" if args.scenario else ""))
    planner = Planner.from_pretrained(args.checkpoint)
    report = {"checkpoint": args.checkpoint, "data": str(args.data),
              "scenario": args.scenario, **plan_with_and_without_status(planner, args.data,
                                                                         records)}
    if args.probe_train is not None:
        every = planning_records(args.probe_train, args.scenario, 0)
        train = every[::max(1, len(every) // max(1, args.probe_limit))][:args.probe_limit]
        train_x = visual_features(planner.model, args.probe_train, train)
        test_x = visual_features(planner.model, args.data, records)
        train_y = np.array([lateral_at_4s(r) for r in train])
        test_y = np.array([lateral_at_4s(r) for r in records])
        report["probe"] = {"train_frames": len(train), "features": int(train_x.shape[1]),
                           "r2": {str(lam): ridge_r2(train_x, train_y, test_x, test_y, lam)
                                  for lam in RIDGE_LAMBDAS}}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{report['frames']} planning frames of {args.data}"
          + (f" ({args.scenario})" if args.scenario else "")
          + f", {report['unparsed']} unparsed; the expert's |lateral at 4 s|: "
          f"{report['expert_mean_abs']:.2f} m")
    for name, label in (("as_recorded", "as recorded"), ("lateral_zeroed", "zeroed")):
        row = report[name]
        print(f"  plans, lateral status {label:<11}: |error| "
              f"{row['mean_abs_error']:6.2f} m, corr {row['corr']:5.2f}, "
              f"|lateral| {row['mean_abs']:6.2f} m")
    if "probe" in report:
        probe = report["probe"]
        scores = ", ".join(f"lambda {lam}: {r2:.3f}" for lam, r2 in probe["r2"].items())
        print(f"  linear probe of the visual tokens ({probe['features']} features, "
              f"{probe['train_frames']} frames of {args.probe_train}): R^2 {scores}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
