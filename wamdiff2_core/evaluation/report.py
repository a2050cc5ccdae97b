"""Writing an open-loop report to a folder: JSON, text summary and PNG plots."""
from __future__ import annotations

import os
from pathlib import Path

from .open_loop import OpenLoopReport
from .plots import plot_collision_per_waypoint, plot_l2_per_waypoint

REPORT_JSON = "open_loop.json"
SUMMARY_TXT = "open_loop.txt"
L2_PNG = "l2_per_waypoint.png"
COLLISION_PNG = "collision_per_waypoint.png"


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
    paths["summary"].write_text(report.summary() + "\n")
    planning = report.tasks.get("planning", {})
    for stale in (L2_PNG, COLLISION_PNG):
        (out / stale).unlink(missing_ok=True)
    if planning.get("l2_per_waypoint") is not None:
        paths["l2_plot"] = out / L2_PNG
        plot_l2_per_waypoint(planning["l2_per_waypoint"], paths["l2_plot"])
    if planning.get("collision_rate_per_waypoint") is not None:
        paths["collision_plot"] = out / COLLISION_PNG
        plot_collision_per_waypoint(planning["collision_rate_per_waypoint"],
                                    paths["collision_plot"],
                                    planning.get("gt_collision_rate_per_waypoint"))
    return paths
