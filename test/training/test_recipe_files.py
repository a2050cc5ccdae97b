"""Hostile recipe and pipeline files (issue 54): a FIFO, /dev/zero behind a symlink, deep
nesting, a YAML alias bomb or a malformed pipeline stage as `train --config`, `memory-plan
--config` or `pipeline --plan`, and an alias or deep value in a key=value override, are one
sentence naming the file (or the key), exit 2, no traceback, at once."""
from __future__ import annotations

import time

import pytest
from hostile_files import hostile
from refusals import assert_one_sentence

from wamdiff2_core.apps.cli import main

PHRASES = {"fifo": "FIFO", "dev zero": "character device", "deep": "levels deep",
           "bomb": "alias *a"}


@pytest.mark.parametrize("kind", list(PHRASES))
@pytest.mark.parametrize("command", ["train", "memory-plan"])
def test_hostile_recipe_is_one_sentence(tmp_path, capsys, kind, command):
    recipe = hostile(tmp_path / "recipe.yaml", kind)
    argv = [command, "--config", str(recipe)] + (["--gpus", "1"] if command != "train"
                                                 else [])
    start = time.monotonic()
    code = main(argv)
    assert_one_sentence(code, capsys.readouterr().err, f"recipe file {recipe}",
                        PHRASES[kind])
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("kind", list(PHRASES))
def test_hostile_pipeline_plan_is_one_sentence(tmp_path, capsys, kind):
    plan = hostile(tmp_path / "plan.yaml", kind)
    code = main(["pipeline", "--preset", "tiny", "--data", str(tmp_path), "--out",
                 str(tmp_path / "out"), "--plan", str(plan)])
    assert_one_sentence(code, capsys.readouterr().err, f"pipeline file {plan}",
                        PHRASES[kind])


@pytest.mark.parametrize("text, phrase", [
    ("[1, 2]", "must hold a mapping"),
    ("stages: 5", "stages must be a list"),
    ("stages: [5]", "each stage must be a mapping"),
    ("stages: [{name: a}]", "each stage must be a mapping"),
])
def test_malformed_pipeline_plan_is_one_sentence(tmp_path, capsys, text, phrase):
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    code = main(["pipeline", "--preset", "tiny", "--data", str(tmp_path), "--out",
                 str(tmp_path / "out"), "--plan", str(plan)])
    assert_one_sentence(code, capsys.readouterr().err, phrase)


@pytest.mark.parametrize("value, phrase", [("[*x]", "alias *x"),
                                           ("[" * 5000, "more than 64 levels")])
def test_hostile_override_values_are_one_sentence(capsys, value, phrase):
    code = main(["memory-plan", "--config", "block4.yaml", "--gpus", "1",
                 f"optim.lr={value}"])
    assert_one_sentence(code, capsys.readouterr().err, "override optim.lr", phrase)
