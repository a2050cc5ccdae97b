"""Inputs for `wamdiff2 predict` tests: a hand-written file in the reference repository's
conversation format (no ``task``, no ``meta``; ``datasource`` on some records) made from the
committed bundle-answer frames, with bad records where a test asks for them."""
from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "bundle_answers"


def reference_records() -> list[dict]:
    """The 18 fixture records as the reference's data holds them (ids, images, turns)."""
    records = json.loads((FIXTURE / "records.json").read_text())
    out = []
    for i, record in enumerate(records):
        ref = {"id": record["id"], "image": record["image"],
               "conversations": record["conversations"]}
        if i % 3 == 0:
            ref["datasource"] = "sim"
        out.append(ref)
    return out


BAD_RECORDS = {
    "missing_image": {"id": "bad_missing_image", "image": ["images/nope.png"],
                      "conversations": [{"from": "human", "value": "Where? <image>"},
                                        {"from": "gpt", "value": "here"}]},
    "no_image": {"id": "bad_no_image", "conversations": [
        {"from": "human", "value": "What is ahead?"}, {"from": "gpt", "value": "a car"}]},
    "empty_conversation": {"id": "bad_empty", "image": ["images/00000_000.png"],
                           "conversations": []},
    "corrupt_image": {"id": "bad_corrupt", "image": ["images/corrupt.png"],
                      "conversations": [{"from": "human", "value": "What is ahead? <image>"},
                                        {"from": "gpt", "value": "a car"}]},
}


def write_reference_file(folder: Path, bad: tuple[str, ...] = ("missing_image",),
                         at: int = 5, jsonl: bool = False) -> Path:
    """``folder/eval.json`` (or ``.jsonl``) with the fixture's images under ``folder/images``;
    the ``bad`` records are inserted at position ``at``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(FIXTURE / "images", folder / "images", dirs_exist_ok=True)
    png = (folder / "images" / "00000_000.png").read_bytes()
    (folder / "images" / "corrupt.png").write_bytes(png[:len(png) // 3])
    records = reference_records()
    records[at:at] = [BAD_RECORDS[name] for name in bad]
    path = folder / ("eval.jsonl" if jsonl else "eval.json")
    if jsonl:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records, indent=1))
    return path


def without_timing(items: list[dict], batch_fields: bool = False) -> list[dict]:
    """Predictions without what depends on timing (and, with ``batch_fields``, on the batch
    a record was decoded in: forwards, batch size)."""
    drop = {"decode_ms"} | ({"forwards", "batch_size"} if batch_fields else set())
    return [{**item, "wamdiff2": {k: v for k, v in item["wamdiff2"].items() if k not in drop}}
            for item in items]


def free_port() -> int:
    """A TCP port free now, for one torchrun's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
