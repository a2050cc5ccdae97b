"""The records a predictions, scoring or training run reads, and where their images are.

``read_input(data, image_root)`` reads a data set directory (its ``train.json``) or a records
file (a JSON list or JSONL, the reference repository's conversation format) through
``user_files`` and says where relative image paths are found. One rule, the same for
``wamdiff2 predict``, ``wamdiff2 eval open-loop``, ``eval compare --data`` and (through
``image_root``) ``wamdiff2 train``:

- ``--image-root DIR`` (training: ``data.image_root``) given: relative image paths are under
  ``DIR``;
- the input is a data set directory, or every record names a ``task`` (this project's
  layout: ``wamdiff2 data generate`` writes its images beside its records): under the records
  file's folder;
- otherwise (the reference's layout: records without ``task``, images named from the
  reference repository's root): under the working directory, as the reference's inference
  script and its training data set open them.

Absolute paths are used as they are. A record is never refused here: malformed records are
the predictions run's (or the scorer's) to report one by one.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wamdiff2_core.tasks import RECORDS_FILE
from wamdiff2_core.user_files import MAX_RECORDS_BYTES, read_json_or_lines

#: How the folder relative image paths are under was chosen (``ImageRoot.rule``).
EXPLICIT, DATA_SET, PROJECT_FILE, REFERENCE = ("--image-root", "data set directory",
                                               "records with a task", "reference layout")


@dataclass(frozen=True)
class ImageRoot:
    """Where a run finds relative image paths, and why there."""

    path: Path
    rule: str

    def describe(self, option: str = "--image-root") -> str:
        """One line for the start of a run."""
        why = {EXPLICIT: f"given by {option}",
               DATA_SET: "the data set directory: its images are beside its records",
               PROJECT_FILE: "the records file's folder: every record names a task "
                             "(this project's layout)",
               REFERENCE: "the working directory: records without a task are in the "
                          "reference's layout, whose image paths start at its repository's "
                          "root"}[self.rule]
        hint = "" if self.rule == EXPLICIT else f"; {option} DIR to change"
        return f"image paths are relative to {self.path} ({why}{hint})"


@dataclass(frozen=True)
class InputRecords:
    """The records of an input and where their images are."""

    records: list
    path: Path                          # the records file
    image_root: ImageRoot


def records_file(data: str | os.PathLike, option: str = "--input") -> tuple[Path, bool]:
    """The records file of ``data`` (itself, or ``data/train.json`` for a directory) and
    whether ``data`` is a data set directory. ValueError, one sentence, when there is none."""
    path = Path(data)
    if str(data) == "":
        raise ValueError(f"{option} is an empty path")
    if path.is_dir():
        if not (path / RECORDS_FILE).exists():
            raise ValueError(f"{option} {path} is a folder without {RECORDS_FILE}: give a "
                             f"data set directory or a records file")
        return path / RECORDS_FILE, True
    return path, False


def read_records_file(path: Path, option: str = "--input") -> list:
    """The records of a JSON list or JSONL file, within ``user_files``' limits; ValueError,
    one sentence naming the file, when it cannot be read or holds no records. A line may be
    as large as the whole file's limit: one huge record fails alone, later, with its error
    (``requests.check_text``), and the run goes on."""
    records = read_json_or_lines(path, f"{option} records file",
                                 max_line_bytes=MAX_RECORDS_BYTES)
    if not records:
        raise ValueError(f"{option} records file {path} holds no records")
    return records


def image_root(records: Sequence, path: Path, is_dir: bool,
               explicit: str | os.PathLike | None = None,
               option: str = "--image-root") -> ImageRoot:
    """Where ``records`` (read from ``path``) find their relative image paths (see the
    module docstring). ValueError when ``explicit`` (given as ``option``) is not a folder."""
    if explicit is not None:
        root = Path(explicit)
        if not root.is_dir():
            raise ValueError(f"{option} {explicit} is not a folder")
        return ImageRoot(root.resolve(), EXPLICIT)
    if is_dir:
        return ImageRoot(path.parent.resolve(), DATA_SET)
    objects = [r for r in records if isinstance(r, Mapping)]
    if objects and all(isinstance(r.get("task"), str) for r in objects):
        return ImageRoot(path.parent.resolve(), PROJECT_FILE)
    return ImageRoot(Path.cwd(), REFERENCE)


def read_input(data: str | os.PathLike, explicit_root: str | os.PathLike | None = None,
               option: str = "--input") -> InputRecords:
    """The records of ``data`` and their image root; ValueError, one sentence, when the
    input cannot be read (a bad record is not an error here)."""
    path, is_dir = records_file(data, option)
    records = read_records_file(path, option)
    return InputRecords(records, path, image_root(records, path, is_dir, explicit_root))


__all__ = ["DATA_SET", "EXPLICIT", "ImageRoot", "InputRecords", "PROJECT_FILE", "REFERENCE",
           "image_root", "read_input", "read_records_file", "records_file"]
