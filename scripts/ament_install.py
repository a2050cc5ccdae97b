#!/usr/bin/env python3
"""Make `ros2 run wamdiff2_ros ...` and `ros2 launch wamdiff2_ros ...` find this checkout.

    python scripts/ament_install.py .venv        # scripts/setup.sh runs it

`ros2 run` / `ros2 launch` look a package up in the ament index of every prefix on
AMENT_PREFIX_PATH: PREFIX/share/ament_index/resource_index/packages/NAME, then
PREFIX/share/NAME/{package.xml,launch,config} and PREFIX/lib/NAME/EXECUTABLE. An editable
pip install writes none of these (colcon does: docs/ros.md). This writes them into PREFIX:
the share files as links to the checkout's files (edits apply at once, as the editable
install does for the code; real directories, since `ros2 launch` does not follow linked
ones; run it again after adding a file), the executable as a link to PREFIX/bin/planner_node.
Idempotent; standard library only. Prints what it wrote.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PACKAGE = "wamdiff2_ros"
EXECUTABLES = ("planner_node",)
REPO = Path(__file__).resolve().parents[1]


def _link(target: Path, link: Path) -> None:
    """`link` -> `target`, replacing whatever link or file was there."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        raise SystemExit(f"ament_install: {link} exists and is not a link; remove it first")
    link.symlink_to(target)


def install(prefix: Path, repo: Path = REPO) -> list[Path]:
    """Write the ament index entry, share files and executables of the package into `prefix`;
    the paths written. SystemExit with one sentence when an executable is not installed."""
    written = []
    marker = prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")                      # the index entry is an empty file
    written.append(marker)
    share = prefix / "share" / PACKAGE
    files = [repo / "package.xml", *sorted((repo / "launch").glob("*.py")),
             *sorted(p for p in (repo / "config").rglob("*") if p.is_file())]
    for source in files:
        link = share / source.relative_to(repo)
        if link.parent.is_symlink():          # a linked directory from an older install
            link.parent.unlink()
        _link(source, link)
        written.append(link)
    for exe in EXECUTABLES:
        script = prefix / "bin" / exe
        if not script.exists():
            raise SystemExit(f"ament_install: {script} is missing: pip install -e . into "
                             f"{prefix} first")
        _link(script, prefix / "lib" / PACKAGE / exe)
        written.append(prefix / "lib" / PACKAGE / exe)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", nargs="?", default=os.environ.get("VIRTUAL_ENV"),
                        help="the environment's prefix (default: $VIRTUAL_ENV)")
    args = parser.parse_args(argv)
    if not args.prefix:
        parser.error("give the prefix (the virtual environment's directory)")
    for path in install(Path(args.prefix).resolve()):
        print(f"ament_install: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
