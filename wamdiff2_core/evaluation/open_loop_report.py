"""An open-loop report as text (:func:`format_summary`) and in a folder: JSON, text summary
and PNG plots (:func:`write_report`)."""
from __future__ import annotations

import os
from pathlib import Path

from .l2 import HORIZONS_S
from .open_loop import OpenLoopReport
from .open_loop_plots import plot_collision_per_waypoint, plot_l2_per_waypoint

REPORT_JSON = "open_loop.json"
SUMMARY_TXT = "open_loop.txt"
L2_PNG = "l2_per_waypoint.png"
COLLISION_PNG = "collision_per_waypoint.png"


def _num(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _task_table(report: OpenLoopReport) -> list[str]:
    lines = [f"{'task':<10} {'records':>8} {'parse fail':>11} {'ms/record':>10}"]
    for name, m in report.tasks.items():
        lines.append(f"{name:<10} {m['num_records']:>8d} {_pct(m['parse_failure_rate']):>11} "
                     f"{_num(m['mean_predict_ms'], '.1f'):>10}")
    return lines


def _planning(m: dict) -> list[str]:
    head = "".join(f"{f'{h:g} s':>9}" for h in HORIZONS_S)
    lines = [f"Planning ({m['num_parsed']} parsed plans; L2 in metres)",
             f"  {'':<24}{head}"]
    rows = (("L2 at t (waypoint at t)", "l2_at_{}s", _num),
            ("L2 avg (waypoints <= t)", "l2_avg_{}s", _num),
            ("collision by t", "collision_rate_by_{}s", _pct),
            ("expert collision by t", "gt_collision_rate_by_{}s", _pct))
    for label, key, fmt in rows:
        cells = "".join(f"{fmt(m[key.format(f'{h:g}')]):>9}" for h in HORIZONS_S)
        lines.append(f"  {label:<24}{cells}")
    curve = m["l2_per_waypoint"]
    if curve is not None:
        lines.append("  L2 per waypoint (0.5..4 s): " + " ".join(f"{v:.2f}" for v in curve))
    lines.append(f"  collision rate (any waypoint): {_pct(m['collision_rate'])} "
                 f"(expert {_pct(m['gt_collision_rate'])}, {m['num_with_others']} plans)")
    cis = m.get("intervals") or {}
    shown = [f"{label} {_ci(cis.get(key), fmt)}" for label, key, fmt in (
        ("L2 avg 3 s", "l2_avg_3s", _num), ("L2 mean", "l2_mean", _num),
        ("collision rate", "collision_rate", _pct),
        ("parse failures", "parse_failure_rate", _pct)) if cis.get(key)]
    if shown:
        lines.append("  95% intervals (bootstrap over records): " + "; ".join(shown))
    return lines


def _ci(pair, fmt) -> str:
    return f"[{fmt(pair[0])}, {fmt(pair[1])}]"


def _detection(m: dict) -> list[str]:
    lines = [f"Detection: mAP@[.5:.95] {_num(m['map'])}  AP50 {_num(m['ap50'])}  "
             f"({m['num_images']} images, {m['num_gt']} boxes, {m['num_pred']} predicted"
             f"{_dropped(m.get('dropped_boxes', 0))})"]
    areas = [f"{name} px: {_num(a['ap50'])} / {_num(a['recall50'])} ({a['num_gt']})"
             for name, a in (m.get("by_area") or {}).items() if a["num_gt"]]
    if areas:
        lines.append("  AP50 / recall@0.5 by box area (boxes): " + "; ".join(areas))
    return lines


def _dropped(n: int) -> str:
    return f", {n} dropped: corners out of order" if n else ""


def _qa(m: dict) -> list[str]:
    ci = (m.get("intervals") or {}).get("accuracy")
    within = f" {_ci(ci, _pct)}" if ci else ""
    return [f"QA: exact-match accuracy {_pct(m['accuracy'])}{within} "
            f"({m['num_correct']}/{m['num_records']}; valid answers "
            f"{_pct(m['in_answer_set_rate'])})"]


_SECTIONS = {"planning": _planning, "detection": _detection, "qa": _qa}


def format_summary(report: OpenLoopReport) -> str:
    """Headline numbers as aligned text: a per-task table, then one block per task."""
    lines = [f"Open-loop evaluation: {report.num_records} records in {report.seconds:.1f} s"]
    lines += _task_table(report)
    for name, m in report.tasks.items():
        if m["num_records"] and name in _SECTIONS:
            lines += [""] + _SECTIONS[name](m)
    failed = {task: n for task, n in sorted(report.failures.items()) if n}
    if failed:      # records never scored (unreadable image, malformed record): say so here too
        lines += ["", "Failed records (not scored): "
                  + ", ".join(f"{t} x{n}" for t, n in failed.items())
                  + (f"; first: {report.first_failure}" if report.first_failure else "")]
    if report.skipped:
        lines += ["", "Skipped (no scorer): "
                  + ", ".join(f"{t} x{n}" for t, n in sorted(report.skipped.items()))]
    return "\n".join(lines)


def write_report(report: OpenLoopReport, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the report into ``out_dir`` (created if needed); returns ``{kind: path}``.

    Always ``json`` and ``summary``; ``l2_plot`` and ``collision_plot`` only when some plan
    was parsed (respectively, some plan had other vehicles to collide with); a plot left
    from an earlier run in ``out_dir`` that this report has no data for is removed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / REPORT_JSON, "summary": out / SUMMARY_TXT}
    paths["json"].write_text(report.to_json() + "\n")
    paths["summary"].write_text(format_summary(report) + "\n")
    planning = report.tasks.get("planning", {})
    for stale in (L2_PNG, COLLISION_PNG):
        (out / stale).unlink(missing_ok=True)
    if planning.get("l2_per_waypoint") is not None:
        paths["l2_plot"] = out / L2_PNG
        plot_l2_per_waypoint(planning["l2_per_waypoint"], paths["l2_plot"],
                             intervals=(planning.get("intervals") or {}).get(
                                 "l2_per_waypoint"))
    if planning.get("collision_rate_per_waypoint") is not None:
        paths["collision_plot"] = out / COLLISION_PNG
        plot_collision_per_waypoint(planning["collision_rate_per_waypoint"],
                                    paths["collision_plot"],
                                    planning.get("gt_collision_rate_per_waypoint"))
    return paths
