"""Hostile scorer weights given to `wamdiff2 plan --scorer learned --scorer-weights FILE`
(issue 54): a FIFO, /dev/zero behind a symlink, deep nesting or a malformed field is one
sentence naming the file, exit 2, no traceback, within bounded time and memory."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from hostile_files import KINDS, hostile
from refusals import assert_one_sentence, run_measured

from wamdiff2_core.candidates.features import FEATURES
from wamdiff2_core.candidates.learned import FORMAT


def weights(**fields) -> str:
    n = len(FEATURES)
    doc = {"format": FORMAT, "features": list(FEATURES), "centre": [0.0] * n,
           "scale": [1.0] * n, "weights": [0.1] * n, "greedy_bonus": 0.0, "info": {}}
    return json.dumps({**doc, **fields})


@pytest.mark.parametrize("kind, phrase", [
    ("fifo", "FIFO"), ("dev zero", "character device"), ("deep", "levels deep"),
    ("centre", "centre must be a list of"), ("features", "fitted on features 5"),
    ("string weight", "weights must be a list of")])
def test_hostile_weights_on_the_command_line(tmp_path, kind, phrase):
    image = tmp_path / "cam.png"
    Image.fromarray(np.full((36, 64, 3), 90, np.uint8)).save(image)
    path = tmp_path / "w.json"
    if kind in KINDS:
        hostile(path, kind)
    elif kind == "centre":
        path.write_text(weights(centre={"a": 1}))
    elif kind == "features":
        path.write_text(weights(features=5))
    else:
        path.write_text(weights(weights=["0.1"] * len(FEATURES)))
    got = run_measured(["plan", "--preset", "tiny", "--block-size", "4", "--steps", "1",
                        "--json", "--image", str(image), "--candidates", "2", "--scorer",
                        "learned", "--scorer-weights", str(path)], timeout=300)
    assert_one_sentence(got.rc, got.stderr, str(path), phrase)
    assert got.peak_mb < 3000
