"""Hostile files a user could hand the project, made on demand (issue 54's constructions):
a FIFO, /dev/zero behind a symlink, a directory, JSON nested 200,000 deep, a YAML alias
bomb, a sparse 4 GiB file."""
from __future__ import annotations

import os
from pathlib import Path

#: Ten YAML anchors, each nine aliases of the one before: 9^9 nodes once expanded.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9) + "]\n"
    for i in range(1, 10))
KINDS = ("fifo", "dev zero", "directory", "deep", "bomb", "huge")


def hostile(path: Path, kind: str) -> Path:
    """Make ``path`` a hostile file of ``kind`` (one of ``KINDS``); returns it."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "deep":
        path.write_text("[" * 200000)
    elif kind == "bomb":
        path.write_text(ALIAS_BOMB)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(4 << 30)
    else:
        raise ValueError(f"unknown hostile file kind {kind!r}: one of {KINDS}")
    return path
