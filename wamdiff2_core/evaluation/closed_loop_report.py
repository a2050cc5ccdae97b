"""The closed-loop report: JSON document, text summary, plots on disk."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from wamdiff2_core.evaluation.pdms import WEIGHTS, summarize

REPORT_FILE = "closed_loop.json"
SUMMARY_FILE = "closed_loop.txt"


def build_report(results, planner: str, config, wall_seconds: float) -> dict:
    """Everything but ``timing`` is deterministic for given arguments."""
    summary = summarize([r.score for r in results])
    by_scenario = {}
    for name in dict.fromkeys(r.scenario for r in results):
        scores = [r.score.score for r in results if r.scenario == name]
        by_scenario[name] = {"episodes": len(scores),
                             "score": round(float(np.mean(scores)), 6)}
    failures = sum(r.stats.parse_failures for r in results)
    invalid = sum(r.stats.invalid_plans for r in results)
    plans = sum(r.stats.plans for r in results)
    planner_seconds = sum(r.stats.planner_seconds for r in results)
    calls = plans + failures + invalid
    return {
        "planner": planner,
        "score": summary["score"],
        "terms": summary["terms"],
        "formula": "mean over 4 s windows of NC * DAC * (5 EP + 5 TTC + 2 C) / 12",
        "weights": WEIGHTS,
        "by_scenario": by_scenario,
        "planner_calls": calls,
        "valid_plans": plans,
        "parse_failures": failures,
        "invalid_plans": invalid,
        "fallback": config.fallback_text(),
        "collisions": sum(r.log.collision_step is not None for r in results),
        "episodes": [r.to_json() for r in results],
        "config": json.loads(json.dumps(asdict(config))),
        "timing": {"wall_s": round(wall_seconds, 2),
                   "planner_ms_per_call": round(1000 * planner_seconds / max(calls, 1), 3)},
    }


def format_text(report: dict) -> str:
    """A short human-readable summary of a report."""
    terms = " ".join(f"{k}={v:.3f}" for k, v in report["terms"].items())
    lines = [f"closed loop: planner {report['planner']}, {len(report['episodes'])} episodes",
             f"score {report['score']:.3f}  ({report['formula']})",
             f"terms (means over windows): {terms}",
             f"collisions {report['collisions']}, planner calls {report['planner_calls']}, "
             f"parse failures {report['parse_failures']}, invalid plans "
             f"{report['invalid_plans']}",
             f"fallback: {report['fallback']}"]
    for name, item in report["by_scenario"].items():
        lines.append(f"  {name:<13} {item['episodes']:3d} episodes  score {item['score']:.3f}")
    for episode in report["episodes"]:
        collision = episode["collision"]
        note = "" if collision is None else (
            f"  collision at {collision['time_s']} s"
            + (" (at fault)" if collision["at_fault"] else " (hit from behind)"))
        lines.append(f"  episode {episode['index']:3d} {episode['scenario']:<13} "
                     f"score {episode['score']:.3f}{note}")
    return "\n".join(lines) + "\n"


def write_report(out: str | Path, results, report: dict, max_plots: int = 12) -> list[Path]:
    """Write the JSON report, the text summary and PNG plots; return the written paths."""
    from wamdiff2_core.evaluation.closed_loop_plots import plot_episode, plot_scores

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / REPORT_FILE, out / SUMMARY_FILE, out / "scores.png"]
    paths[0].write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    paths[1].write_text(format_text(report))
    plot_scores(results, paths[2], report["planner"])
    for result in results[:max_plots]:
        path = out / f"episode_{result.index:03d}_{result.scenario}.png"
        plot_episode(result, path, report["planner"])
        paths.append(path)
    return paths
