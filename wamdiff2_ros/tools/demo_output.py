"""The demo's own files in its output folder, so that a second `wamdiff2 demo` replaces its
last output and never a user's file.

Before it writes anything a run lists the files it will write in ``OUT/.wamdiff2-demo.json``
(the manifest). The next run removes exactly the files the manifest lists (an interrupted
run's included) and refuses, naming it, any other file in the way: one at a path the run
writes, or in ``OUT/frames/``. Without a manifest, a report.json that a demo wrote before
manifests existed stands in for it. The node's log, ``planner_node.log``, is overwritten as
always.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

from wamdiff2_ros.tools.bag_io import BagError

MANIFEST = ".wamdiff2-demo.json"
OUTPUTS = ("outputs.mcap", "report.json")
LOG = "planner_node.log"
FRAMES = "frames"
# what a manifest may name: never a path outside OUT, whatever the file says
_OWN_NAME = re.compile(r"^(outputs\.mcap|report\.json|frames/frame_\d{4,}\.png)$")


def frame_file(index: int) -> str:
    """A frame's overlay PNG, relative to OUT."""
    return f"{FRAMES}/frame_{index:04d}.png"


def run_files(frame_indices: Iterable[int]) -> list[str]:
    """The files (relative to OUT) a run over these frames writes, the log aside."""
    return [*OUTPUTS, *(frame_file(i) for i in frame_indices)]


def previous_files(out: Path) -> set[str]:
    """The files the last demo run in `out` wrote (relative names): its manifest's, else a
    demo report.json's; empty where neither is there or readable."""
    listed = _read_json(out / MANIFEST)
    if isinstance(listed, list):
        return {n for n in listed if isinstance(n, str) and _OWN_NAME.match(n)}
    report = _read_json(out / "report.json")
    if isinstance(report, dict) and isinstance(report.get("per_frame"), list) and \
            Path(str(report.get("output_bag", ""))).name == OUTPUTS[0]:
        indices = [r.get("index") for r in report["per_frame"] if isinstance(r, dict)]
        return set(run_files(i for i in indices if isinstance(i, int) and i >= 0))
    return set()


def _read_json(path: Path):
    if not path.is_file() or path.stat().st_size > 10_000_000:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def replace_previous(out: Path, frame_indices: Iterable[int]) -> int:
    """Make `out` ready for a run over these frames: remove the last demo run's files, list
    this run's in the manifest; BagError naming the first file in the way that the demo did
    not write. Returns how many files were removed."""
    previous, ours = previous_files(out), run_files(frame_indices)
    blocking = [name for name in ours if (out / name).exists() and name not in previous]
    frames = out / FRAMES
    if frames.is_dir():
        blocking += sorted(f"{FRAMES}/{p.name}" for p in frames.iterdir()
                           if f"{FRAMES}/{p.name}" not in previous)
    elif frames.exists():
        blocking.append(FRAMES)
    if blocking:
        raise BagError(f"output {out / blocking[0]} already exists and is not a previous "
                       "demo run's; remove it or choose another --out")
    removed = 0
    for name in sorted(previous):
        path = out / name
        if path.is_file() or path.is_symlink():       # a link goes, never its target
            path.unlink()
            removed += 1
    if frames.is_dir():
        frames.rmdir()                   # empty: every file in it was the last run's
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).write_text(json.dumps(ours) + "\n")
    return removed
