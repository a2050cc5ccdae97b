"""The unfinished part of a predictions run: ``OUTPUT.parts/``, one file per decoded batch.

Every rank writes each batch it decodes as one file, atomically (``atomic_files``), the
moment the batch is done: a killed run loses at most the batches in flight, and a resumed
run reads what is there. ``manifest.json`` says which input and settings the parts belong
to (the caller's description: here the records' digest and the decoding settings), so a
resume never mixes answers of two inputs or two settings. Rank 0 merges the parts
into the output in input order and then removes the folder.

Everything read back is a user's file like any other (a folder can be edited, a part
swapped for a FIFO or a symlink to ``/dev/zero``): the manifest and the parts go through
``user_files``, and every item of a part must be a prediction item of this input
(``predictions.item_problem``), or the run is refused in one sentence naming the file.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.user_files import MAX_RECORDS_BYTES, read_json

from .predictions import ITEM_SCHEMA, item_index, item_problem, read_predictions

MANIFEST = "manifest.json"
FROM_OUTPUT = "from-output.json"      # the usable objects of an earlier output (resume)


def parts_dir(output: str | os.PathLike) -> Path:
    """Where the parts of a run writing ``output`` go."""
    output = Path(output)
    return output.with_name(output.name + ".parts")


class PartsStore:
    """The parts folder of one output. ``manifest``: what the parts belong to (JSON-able)."""

    def __init__(self, output: str | os.PathLike, manifest: Mapping[str, Any]):
        self.output = Path(output)
        self.dir = parts_dir(output)
        self.manifest = dict(manifest)
        self.run = uuid.uuid4().hex[:8]          # part names of this run never reuse old ones
        self.written = 0

    # -------------------------------------------------------------- rank 0, before decoding
    def open(self, resume: bool, records: Sequence[Any]) -> None:
        """Create the folder (a fresh run) or check it (``resume``); ValueError, one
        sentence, when an unfinished run is in the way or belongs to another input or other
        settings. With ``resume``, an earlier output's objects that match ``records`` (same
        position and id) are taken over as done."""
        if self.dir.exists() and not resume:
            raise ValueError(f"{self.dir} holds an unfinished run's predictions: pass --resume "
                             f"to finish it, or remove that folder to start over")
        if self.dir.exists():
            self._check_manifest()
        else:
            self.dir.mkdir(parents=True)
            write_atomic(self.dir / MANIFEST, json.dumps(self.manifest, indent=1).encode())
        if resume and self.output.is_file() and not (self.dir / FROM_OUTPUT).exists():
            kept = _matching(self.output, records)
            write_atomic(self.dir / FROM_OUTPUT, json.dumps(kept).encode())

    def _check_manifest(self) -> None:
        try:
            found = read_json(self.dir / MANIFEST, "parts manifest")
        except ValueError as exc:
            raise ValueError(f"{self.dir} has no readable {MANIFEST} ({exc}): it was not "
                             f"made by wamdiff2 predict; remove it to start over") from None
        if not isinstance(found, dict):
            raise ValueError(f"parts manifest {self.dir / MANIFEST} holds a JSON "
                             f"{type(found).__name__}, not an object: it was not made by "
                             f"wamdiff2 predict; remove that folder to start over")
        changed = sorted(k for k in set(found) | set(self.manifest)
                         if found.get(k) != self.manifest.get(k))
        if changed:
            raise ValueError(f"{self.dir} was made with another {' and '.join(changed)}: "
                             f"resume with the same ones, or remove that folder to start over")

    # -------------------------------------------------------------- every rank
    def done(self, records: Sequence[Any]) -> dict[int, dict]:
        """The objects already written, by input index. ValueError, one sentence naming the
        file, for a part that cannot be read or holds anything but prediction items of
        ``records``."""
        out = {}
        for path in sorted(self.dir.glob("*.json")):
            if path.name != MANIFEST:
                out.update((item_index(item), item) for item in read_part(path, records))
        return out

    def write(self, rank: int, items: Sequence[Mapping]) -> None:
        """One decoded batch's objects, as one file, atomically."""
        self.written += 1
        name = f"rank{rank:05d}-{self.run}-{self.written:06d}.json"
        write_atomic(self.dir / name, json.dumps(list(items), ensure_ascii=False).encode())

    # -------------------------------------------------------------- rank 0, at the end
    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def read_part(path: Path, records: Sequence[Any]) -> list[dict]:
    """The items of one part file, each a prediction item of ``records``; ValueError, one
    sentence naming the file, otherwise."""
    items = read_json(path, "prediction part", max_bytes=MAX_RECORDS_BYTES)
    if not isinstance(items, list):
        raise ValueError(f"prediction part {path} holds a JSON {type(items).__name__}, not a "
                         f"list of prediction items; remove that folder to start over")
    for i, item in enumerate(items):
        problem = item_problem(item, records)
        if problem is not None:
            raise ValueError(f"prediction part {path}: entry {i} is not a prediction item of "
                             f"this input ({problem}; {ITEM_SCHEMA}); remove that folder to "
                             f"start over")
    return items


def _matching(output: Path, records: Sequence[Any]) -> list[dict]:
    """The objects of an earlier output that belong to ``records``: this project's objects
    whose recorded position holds a record of the same id."""
    try:
        items = read_predictions(output)
    except ValueError:
        return []                                # not a predictions file: nothing to keep
    return [item for item in items if item_problem(item, records) is None]


__all__ = ["FROM_OUTPUT", "MANIFEST", "PartsStore", "parts_dir", "read_part"]
