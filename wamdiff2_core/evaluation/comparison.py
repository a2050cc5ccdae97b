"""Paired comparisons of two planners: closed loop by episode, open loop by record.

Both planners are measured on the same items (episodes with the same scenario and seed;
records of one data set), so each item gives a difference ``B - A`` and the comparison is
the mean difference with its bootstrap interval (``intervals``). The verdict is "A better",
"B better" or "no difference resolved" (the interval holds zero), with the number of items
a difference of the observed size would need to resolve.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .intervals import (Interval, bootstrap_mean, needed, needed_for_half_width,
                        paired_difference, verdict)

TERMS = ("nc", "dac", "ep", "ttc", "comfort")
#: The half-width the project's claims are judged at (issue 52: about +-0.03).
TARGET_HALF_WIDTH = 0.03
#: Below this many items a percentile bootstrap interval is too narrow (it cannot reach
#: beyond the sample's own values); the verdict line says so.
FEW_ITEMS = 10


def paired_block(a: Sequence[float], b: Sequence[float], names: tuple[str, str],
                 higher_is_better: bool = True) -> dict:
    """Means of A and B with their intervals, the paired difference ``B - A`` with its
    interval, the verdict ("A better", "B better", "no difference resolved"; ``names`` say
    who A and B are in the text) and the items a difference of this size needs."""
    diff = paired_difference(a, b)
    return {"a": bootstrap_mean(a).to_json(), "b": bootstrap_mean(b).to_json(),
            "difference": diff.to_json(),
            "verdict": verdict(diff, ("A", "B"), higher_is_better),
            "needed_to_resolve": needed(diff.sd, diff.mean),
            f"needed_for_half_width_{TARGET_HALF_WIDTH:g}": needed_for_half_width(
                diff.sd, TARGET_HALF_WIDTH),
            "higher_is_better": higher_is_better}


# ------------------------------------------------------------------------------ closed loop
def compare_episodes(a: Mapping[int, dict], b: Mapping[int, dict],
                     names: tuple[str, str]) -> dict:
    """The closed-loop comparison of per-episode reports (``EpisodeResult.to_json()``,
    keyed by episode index) over the episodes both planners drove."""
    indices = sorted(set(a) & set(b))
    if not indices:
        raise ValueError("no episode was driven by both planners")
    ea, eb = [a[i] for i in indices], [b[i] for i in indices]
    report = {"names": list(names), "episodes": len(indices),
              "score": paired_block([e["score"] for e in ea], [e["score"] for e in eb], names),
              "terms": {t: paired_block([e["terms"][t] for e in ea],
                                        [e["terms"][t] for e in eb], names)
                        for t in TERMS},
              "by_scenario": {}, "per_episode": []}
    for scenario in dict.fromkeys(e["scenario"] for e in ea):
        pick = [k for k, e in enumerate(ea) if e["scenario"] == scenario]
        report["by_scenario"][scenario] = paired_block(
            [ea[k]["score"] for k in pick], [eb[k]["score"] for k in pick], names)
    for i, x, y in zip(indices, ea, eb):
        report["per_episode"].append(
            {"index": i, "scenario": x["scenario"], "seed": x["seed"], "a": x["score"],
             "b": y["score"], "difference": round(y["score"] - x["score"], 6),
             "terms_difference": {t: round(y["terms"][t] - x["terms"][t], 6) for t in TERMS},
             "collision": [x["collision"] is not None, y["collision"] is not None],
             "failure": [x.get("failure"), y.get("failure")]})
    report["collisions"] = [sum(e["collision"] is not None for e in ea),
                            sum(e["collision"] is not None for e in eb)]
    report["failed_episodes"] = [sum(e.get("failure") is not None for e in ea),
                                 sum(e.get("failure") is not None for e in eb)]
    return report


def _interval(block: dict, key: str) -> Interval:
    j = block[key]
    return Interval(j["mean"], j["low"], j["high"], j["n"], j["sd"], j["level"])


def verdict_line(block: dict, what: str, names, unit: str = "episodes") -> str:
    """``verdict (score): B better, bundle (B - A = +0.052 [0.021, 0.083], 120 episodes)``
    and, where the interval holds zero, how many items a difference of this size would
    need."""
    diff = _interval(block, "difference")
    who = {"A better": f", {names[0]}", "B better": f", {names[1]}"}.get(block["verdict"], "")
    line = (f"verdict ({what}): {block['verdict']}{who} (B - A = {diff.text('+.3f')}, "
            f"{diff.n} {unit})")
    if diff.n < FEW_ITEMS:
        line += f"; fewer than {FEW_ITEMS} {unit}: the interval is too narrow to trust"
    if block["verdict"] == "no difference resolved":
        need = block["needed_to_resolve"]
        line += ("; B and A did not differ on any item" if need is None else
                 f"; a difference of this size needs about {need} {unit} to resolve")
    return line


def format_closed(report: dict) -> str:
    """The closed-loop comparison as text: verdict, scores, terms, scenarios, episodes."""
    a, b = report["names"]
    block = report["score"]
    lines = [f"paired closed loop: A = {a}", f"                    B = {b}",
             verdict_line(block, "score", report["names"]),
             f"score  A {_interval(block, 'a').text()}  B {_interval(block, 'b').text()}  "
             f"B - A {_interval(block, 'difference').text('+.3f')}  (95% bootstrap intervals)",
             f"collisions A {report['collisions'][0]}, B {report['collisions'][1]}; "
             f"failed episodes A {report['failed_episodes'][0]}, "
             f"B {report['failed_episodes'][1]}",
             "terms (B - A):"]
    for side, label in (("a", "A"), ("b", "B")):
        counts = (report.get("info", {}).get(side) or {}).get("candidates")
        if counts:
            lines.insert(5, f"candidates {label}: {counts['not_greedy']} of {counts['frames']}"
                            f" frames not the greedy plan, {counts['fallbacks']} scorer "
                            f"fallbacks")
    for term, t in report["terms"].items():
        lines.append(f"  {term:<8} A {_interval(t, 'a').text()}  B {_interval(t, 'b').text()}"
                     f"  B - A {_interval(t, 'difference').text('+.3f')}  {t['verdict']}")
    lines.append("by scenario (B - A):")
    for name, s in report["by_scenario"].items():
        lines.append(f"  {name:<13} {_interval(s, 'difference').text('+.3f')} over "
                     f"{s['difference']['n']} episodes  {s['verdict']}")
    lines.append("episodes (A, B, B - A):")
    for e in report["per_episode"]:
        lines.append(f"  {e['index']:4d} {e['scenario']:<13} {e['a']:.3f} {e['b']:.3f} "
                     f"{e['difference']:+.3f}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ open loop
#: Per-record values of the open-loop metrics that are means over records (key, the
#: task's metric it reads, higher is better). mAP is not a mean over records: not paired.
RECORD_METRICS = {
    "planning": (("l2_avg_1s", "l2_avg_1s", False), ("l2_avg_2s", "l2_avg_2s", False),
                 ("l2_avg_3s", "l2_avg_3s", False), ("l2_mean", "l2_mean", False),
                 ("collision", "collision_rate", False),
                 ("parse_failure", "parse_failure_rate", False)),
    "qa": (("accuracy", "accuracy", True), ("parse_failure", "parse_failure_rate", False)),
}


def record_values(record: Mapping, item: Mapping, image_root) -> tuple[str | None, dict]:
    """The task of one record and the per-record values of its ``RECORD_METRICS``, scored
    by the open-loop scoring (``open_loop.score_predictions``) of this record alone; a
    metric undefined for it (L2 of an answer that did not parse) is left out."""
    from .open_loop import score_predictions

    report = score_predictions([record], [item], image_root)
    for task, metrics in report.tasks.items():
        if metrics.get("num_records") and task in RECORD_METRICS:
            return task, {key: float(metrics[source])
                          for key, source, _ in RECORD_METRICS[task]
                          if metrics.get(source) is not None}
        if metrics.get("num_records"):
            return task, {}
    return None, {}


def compare_records(records: Sequence[Mapping], items_a: Sequence[Mapping],
                    items_b: Sequence[Mapping], image_root, names: tuple[str, str]) -> dict:
    """The open-loop comparison of two predictions (``items_x[i]`` answers ``records[i]``):
    per task and metric, the paired difference over the records where both define it."""
    scored_a = [record_values(r, x, image_root) for r, x in zip(records, items_a, strict=True)]
    scored_b = [record_values(r, x, image_root) for r, x in zip(records, items_b, strict=True)]
    # a record one side failed on (no task scored) still pairs by the other side's task:
    # it then has no values on the failed side and drops out of that metric's pairs
    tasks = [a or b for (a, _), (b, _) in zip(scored_a, scored_b)]
    values_a, values_b = [v for _, v in scored_a], [v for _, v in scored_b]
    report: dict = {"names": list(names), "records": len(records), "tasks": {},
                    "not_scored": {"a": sum(t is None for t, _ in scored_a),
                                   "b": sum(t is None for t, _ in scored_b)}}
    for task, metrics in RECORD_METRICS.items():
        rows = [k for k, t in enumerate(tasks) if t == task]
        if not rows:
            continue
        out = {}
        for key, _, higher in metrics:
            both = [k for k in rows if key in values_a[k] and key in values_b[k]]
            if both:
                out[key] = paired_block([values_a[k][key] for k in both],
                                        [values_b[k][key] for k in both], names, higher)
        report["tasks"][task] = out
    skipped = sorted({t for t in tasks if t is not None and t not in RECORD_METRICS})
    if skipped:
        report["not_paired"] = {t: "not a mean over records (mAP): no per-record pairing"
                                if t == "detection" else "no per-record metric"
                                for t in skipped}
    return report


def format_open(report: dict) -> str:
    a, b = report["names"]
    lines = [f"paired open loop ({report['records']} records): A = {a}",
             f"{'':<{len('paired open loop')}}  B = {b}"]
    for task, metrics in report["tasks"].items():
        lines.append(f"{task}:")
        for key, block in metrics.items():
            lines.append(f"  {key:<14} A {_interval(block, 'a').text()}  "
                         f"B {_interval(block, 'b').text()}  "
                         f"B - A {_interval(block, 'difference').text('+.3f')}  "
                         f"{block['verdict']}")
        for key, block in metrics.items():
            lines.append("  " + verdict_line(block, f"{task} {key}", report["names"],
                                             "records"))
    for task, why in report.get("not_paired", {}).items():
        lines.append(f"{task}: {why}")
    failed = report.get("not_scored", {})
    if any(failed.values()):
        lines.append(f"records not scored (failed, unreadable or unmatched): "
                     f"A {failed['a']}, B {failed['b']}")
    return "\n".join(lines) + "\n"


def plot_differences(report: dict, path) -> None:
    """Per-episode differences B - A (bars) with the mean and its 95% interval (band)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    episodes = report["per_episode"]
    diff = report["score"]["difference"]
    figure = Figure(figsize=(max(5.0, 0.08 * len(episodes) + 4), 3.5), dpi=100,
                    layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    x = np.arange(len(episodes))
    d = np.array([e["difference"] for e in episodes])
    ax.bar(x, d, color=np.where(d >= 0, "tab:green", "tab:red"), width=0.8)
    if diff["low"] is not None:
        ax.axhspan(diff["low"], diff["high"], color="tab:blue", alpha=0.25,
                   label=f"95% interval [{diff['low']:+.3f}, {diff['high']:+.3f}]")
    ax.axhline(diff["mean"], color="tab:blue", lw=1.5, label=f"mean {diff['mean']:+.3f}")
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.set_xlabel("episode")
    ax.set_ylabel("score B - A")
    ax.set_title(f"{report['score']['verdict']} ({len(episodes)} episodes)", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    figure.savefig(str(path))
