"""`eval compare`'s episodes on disk, one JSON line each, so a long run loses nothing.

An episode's result depends only on the planner (its spec and settings), the closed-loop
settings and the episode's index (``sim.episode_pool``), so each planner's episodes are
kept apart, in ``STORE/episodes-KEY.jsonl`` with ``KEY`` a hash of exactly those (named in
``STORE/episodes-KEY.json``): one line per finished episode (``{"index": i, "episode":
EpisodeResult.to_json(), "candidates": ...}``), appended and flushed to disk as it ends.
Two comparisons that share a planner and a ``--store`` folder share its episodes. With
``--resume`` a run keeps the stored episodes and drives only the missing ones (a larger
``--episodes`` adds episodes); a killed run's torn last line is dropped.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from wamdiff2_core.apps.common import CliError


class EpisodeStore:
    """The finished episodes of one planner with one set of closed-loop settings."""

    def __init__(self, folder: str | os.PathLike, manifest: dict) -> None:
        self.manifest = json.loads(json.dumps(manifest, sort_keys=True))
        text = json.dumps(self.manifest, sort_keys=True)
        self.key = hashlib.sha256(text.encode()).hexdigest()[:16]
        self.folder = Path(folder)
        self.path = self.folder / f"episodes-{self.key}.jsonl"
        self.manifest_path = self.folder / f"episodes-{self.key}.json"

    def open(self, resume: bool) -> dict[int, dict]:
        """The episodes kept (index -> line); CliError when stored episodes are in the way
        without ``resume``."""
        if self.path.is_file() and not resume:
            raise CliError(f"{self.folder} holds episodes of {self.manifest['spec']} with "
                           f"these settings ({self.path.name}): pass --resume to keep them "
                           f"and run the rest, or choose another --out / --store")
        done = self._read() if resume else {}
        self.folder.mkdir(parents=True, exist_ok=True)
        self.manifest_path.write_text(json.dumps(self.manifest, indent=1, sort_keys=True)
                                      + "\n")
        self._rewrite(done)                     # without a torn last line
        return done

    def _read(self) -> dict[int, dict]:
        done = {}
        if not self.path.is_file():
            return done
        for line in self.path.read_text().splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:        # the line a killed run was writing
                continue
            done[int(item["index"])] = item
        return done

    def _rewrite(self, done: dict) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(item, sort_keys=True) + "\n"
                               for _, item in sorted(done.items())))
        os.replace(tmp, self.path)

    def add(self, item: dict) -> None:
        """Append one finished episode, on disk before this returns."""
        with open(self.path, "a") as handle:
            handle.write(json.dumps(item, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
