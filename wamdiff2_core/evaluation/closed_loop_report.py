"""The closed-loop report: JSON document, text summary, plots on disk."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from wamdiff2_core.evaluation.intervals import bootstrap_mean
from wamdiff2_core.evaluation.pdms import WEIGHTS, summarize

REPORT_FILE = "closed_loop.json"
SUMMARY_FILE = "closed_loop.txt"


def distribution(values, scale: float = 1.0, digits: int = 3) -> dict:
    """p50 / p95 / max and count of ``values`` times ``scale`` (None where there are none)."""
    if len(values) == 0:
        return {"p50": None, "p95": None, "max": None, "n": 0}
    array = np.asarray(values, dtype=np.float64) * scale
    return {"p50": round(float(np.percentile(array, 50)), digits),
            "p95": round(float(np.percentile(array, 95)), digits),
            "max": round(float(array.max()), digits), "n": int(len(array))}


def build_report(results, planner: str, config, wall_seconds: float,
                 driver: str = "in-process", latency_model: dict | None = None) -> dict:
    """Everything but ``timing`` is deterministic for given arguments, unless the world ran
    in real time (``config.time_mode`` realtime), where latencies, plan ages and therefore
    the driving itself depend on the machine."""
    summary = summarize([r.score for r in results])
    by_scenario = {}
    for name in dict.fromkeys(r.scenario for r in results):
        scores = [r.score.score for r in results if r.scenario == name]
        by_scenario[name] = {"episodes": len(scores),
                             "score": round(float(np.mean(scores)), 6),
                             "interval": _pair(bootstrap_mean(scores))}
    stats = [r.stats for r in results]
    failures = sum(s.parse_failures for s in stats)
    invalid = sum(s.invalid_plans for s in stats)
    errors = sum(s.model_errors for s in stats)
    plans = sum(s.plans for s in stats)
    calls = plans + failures + invalid + errors
    compute = [c for s in stats for c in s.compute_s]
    return {
        "planner": planner,
        "score": summary["score"],
        "terms": summary["terms"],
        "intervals": mean_intervals(results),
        "formula": "mean over 4 s windows of NC * DAC * (5 EP + 5 TTC + 2 C) / 12",
        "weights": WEIGHTS,
        "by_scenario": by_scenario,
        "planner_calls": calls,
        "valid_plans": plans,
        "parse_failures": failures,
        "invalid_plans": invalid,
        "model_errors": errors,
        "fallback": config.fallback_text(),
        "collisions": sum(r.log.collision_step is not None for r in results),
        "driver": driver,
        "time_mode": config.time_mode,
        "latency_model": latency_model or {"name": config.latency},
        "latency": latency_summary(results),
        "failed_episodes": [{"index": r.index, "reason": r.failure} for r in results
                            if r.failure is not None],
        "episodes": [r.to_json() for r in results],
        "config": json.loads(json.dumps(asdict(config))),
        "timing": {"wall_s": round(wall_seconds, 2),
                   "planner_ms_per_call": round(1000 * sum(compute) / max(calls, 1), 3),
                   "planner_ms": distribution(compute, scale=1e3)},
    }


def _pair(interval) -> list[float] | None:
    return None if interval.low is None else [round(interval.low, 6),
                                              round(interval.high, 6)]


def mean_intervals(results) -> dict:
    """The 95% bootstrap interval (``evaluation.intervals``) of the mean over episodes of
    the score and of each term: ``{"score": [low, high], "terms": {...}, "episodes": n}``
    (None with fewer than two episodes). Episodes are the unit: windows of one episode are
    not independent."""
    terms = [r.score.terms() for r in results]
    return {"score": _pair(bootstrap_mean([r.score.score for r in results])),
            "terms": {k: _pair(bootstrap_mean([t[k] for t in terms]))
                      for k in (terms[0] if terms else {})},
            "episodes": len(results), "level": 0.95}


def _with_interval(mean: float, interval: list | None) -> str:
    return f"{mean:.3f}" if interval is None else \
        f"{mean:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"


def latency_summary(results) -> dict:
    """Over all episodes: latency (image stamp -> plan received, simulated ms) of the valid
    plans, the age of the plan followed at each control step, plans received per simulated
    second, and camera frames in whose period no new plan arrived."""
    stats = [r.stats for r in results]
    seconds = sum(max(len(r.log.ego) - 1, 1) * r.log.dt for r in results)
    frames = sum(s.frames for s in stats)
    without = sum(s.frames_without_new_plan for s in stats)
    return {"latency_ms": distribution([x for s in stats for x in s.latencies_s], scale=1e3),
            "plan_age_s": distribution([x for s in stats for x in s.plan_ages_s]),
            "plans_per_s": round(sum(s.plans for s in stats) / max(seconds, 1e-9), 3),
            "frames": frames, "frames_without_new_plan": without,
            "frames_without_new_plan_share": round(without / max(frames, 1), 4),
            "dropped_frames": sum(s.dropped_frames for s in stats),
            "stale_brakes": sum(s.stale_brakes for s in stats)}


def format_text(report: dict) -> str:
    """A short human-readable summary of a report."""
    cis = report.get("intervals") or {"score": None, "terms": {}}
    terms = " ".join(f"{k}={_with_interval(v, cis['terms'].get(k))}"
                     for k, v in report["terms"].items())
    lines = [f"closed loop: planner {report['planner']}, {len(report['episodes'])} episodes",
             f"score {_with_interval(report['score'], cis['score'])}  ({report['formula']}; "
             f"[95% bootstrap interval over episodes])",
             f"terms (means over windows): {terms}",
             f"collisions {report['collisions']}, planner calls {report['planner_calls']}, "
             f"parse failures {report['parse_failures']}, invalid plans "
             f"{report['invalid_plans']}",
             _timing_line(report),
             f"fallback: {report['fallback']}"]
    if "candidates" in report:
        lines.append(_candidates_line(report["candidates"]))
    for failed in report["failed_episodes"]:
        lines.append(f"  episode {failed['index']} FAILED: {failed['reason']}")
    for name, item in report["by_scenario"].items():
        lines.append(f"  {name:<13} {item['episodes']:3d} episodes  score "
                     f"{_with_interval(item['score'], item.get('interval'))}")
    for episode in report["episodes"]:
        collision = episode["collision"]
        note = "" if collision is None else (
            f"  collision at {collision['time_s']} s"
            + (" (at fault)" if collision["at_fault"] else " (hit from behind)"))
        lines.append(f"  episode {episode['index']:3d} {episode['scenario']:<13} "
                     f"score {episode['score']:.3f}{note}")
    return "\n".join(lines) + "\n"


def _candidates_line(c: dict) -> str:
    """What a candidates planner chose: how often not the greedy plan, fallbacks, the L2 to
    the expert's plan and (labelled) the privileged score of the chosen / greedy / best."""
    line = (f"candidates: K {c['k']}, scorer {c['scorer']}, drove {c['choice']}: "
            f"{c.get('not_greedy', 0):.0%} of {c['frames']} frames not the greedy plan, "
            f"{c.get('fallbacks', 0)} scorer fallbacks; mean L2 to the expert's plan "
            f"chosen {c.get('l2_chosen_m')} m, greedy {c.get('l2_greedy_m')} m")
    if "oracle_score" in c:
        o = c["oracle_score"]
        line += (f"; privileged score chosen {o['chosen']:.3f}, greedy {o['greedy']:.3f}, "
                 f"best {o['best']:.3f}")
    return line


def _timing_line(report: dict) -> str:
    lat, age = report["latency"]["latency_ms"], report["latency"]["plan_age_s"]
    model = report["latency_model"]
    label = model.get("source") or " ".join(
        [model["name"]] + ([f"{model['ms']:g} ms"] if "ms" in model else []))
    mode = report["time_mode"] + (f" ({label})" if report["time_mode"] == "latency-model"
                                  else "")

    def pair(d, unit):
        return "-" if d["n"] == 0 else f"{d['p50']:g}/{d['p95']:g} {unit}"

    return (f"time {mode}, plans {report['driver']}: latency p50/p95 {pair(lat, 'ms')}, "
            f"plan age p50/p95 {pair(age, 's')}, {report['latency']['plans_per_s']:g} "
            f"plans/s, {report['latency']['frames_without_new_plan']} of "
            f"{report['latency']['frames']} frames without a new plan")


def write_report(out: str | Path, results, report: dict, max_plots: int = 12) -> list[Path]:
    """Write the JSON report, the text summary and PNG plots; return the written paths."""
    from wamdiff2_core.evaluation.closed_loop_plots import plot_episode, plot_scores, plot_timing

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / REPORT_FILE, out / SUMMARY_FILE, out / "scores.png", out / "timing.png"]
    paths[0].write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    paths[1].write_text(format_text(report))
    plot_scores(results, paths[2], report["planner"], (report.get("intervals") or {}).get(
        "score"))
    plot_timing(results, paths[3], report["planner"])
    for result in results[:max_plots]:
        path = out / f"episode_{result.index:03d}_{result.scenario}.png"
        plot_episode(result, path, report["planner"])
        paths.append(path)
    return paths
