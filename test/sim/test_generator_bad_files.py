"""`wamdiff2 data generate --resume` and `data merge` over hostile files in the folders they
read (issue 54): a FIFO, deep nesting, /dev/zero or a forged part is one sentence naming the
file, exit 2, no traceback, and the folder is left as it was."""
from __future__ import annotations

import json
import os

import pytest
from refusals import assert_one_sentence

from wamdiff2_core.apps.cli import main
from wamdiff2_core.sim.episode import EpisodeConfig
from wamdiff2_core.sim.generator import (PARTS_DIR, PROGRESS_FILE, GeneratorConfig,
                                        GeneratorError, generate)

ARGS = ["--episodes", "2", "--frames", "2", "--no-progress"]


@pytest.mark.parametrize("kind, phrase", [
    ("fifo", "FIFO"), ("deep", "levels deep"), ("zero", "character device"),
    ("list", "must hold a JSON dict")])
def test_hostile_progress_file_is_one_sentence(tmp_path, capsys, kind, phrase):
    out = tmp_path / "data"
    out.mkdir()
    progress = out / PROGRESS_FILE
    if kind == "fifo":
        os.mkfifo(progress)
    elif kind == "deep":
        progress.write_text("[" * 200000)
    elif kind == "zero":
        progress.symlink_to("/dev/zero")
    else:
        progress.write_text("[1]")
    code = main(["data", "generate", "--out", str(out), *ARGS, "--resume"])
    assert_one_sentence(code, capsys.readouterr().err, f"progress file {progress}", phrase)
    assert sorted(p.name for p in out.iterdir()) == [PROGRESS_FILE]


@pytest.mark.parametrize("forged, phrase", [
    ([1], "record 0 is not an object"),
    ("a string", "must hold a JSON list"),
    ([{"id": "x", "prediction": "forged"}], "lacks its task"),
])
def test_forged_part_is_one_sentence(tmp_path, forged, phrase):
    config = GeneratorConfig(episodes=2, episode=EpisodeConfig(frames=2))
    out = tmp_path / "data"
    generate(out, config, progress=False)
    records = json.loads((out / "train.json").read_text())
    # the state of an interrupted run: progress file, episode 0's part, a forged episode 1
    (out / "train.json").unlink()
    (out / PROGRESS_FILE).write_text(json.dumps({"config": config.signature()}))
    parts = out / PARTS_DIR
    parts.mkdir()
    (parts / "00000.json").write_text(json.dumps(
        [r for r in records if r["meta"]["episode"] == 0]))
    (parts / "00001.json").write_text(json.dumps(forged))
    with pytest.raises(GeneratorError, match=phrase) as info:
        generate(out, config, resume=True, progress=False)
    assert str(parts / "00001.json") in str(info.value)
    assert not (out / "train.json").exists()
    (parts / "00001.json").unlink()                 # the good input resumes
    generate(out, config, resume=True, progress=False)
    assert json.loads((out / "train.json").read_text()) == records
