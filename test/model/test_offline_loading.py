"""Loading a model never reaches a network (issue 54): a name that is neither a preset nor
a directory is one sentence at once, with the network unreachable and HF_HUB_OFFLINE
unset; a checkpoint's config, tokenizer and processor come from its directory alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUNDLED = Path(__file__).resolve().parents[2] / "wamdiff2_core" / "assets" / "default_model"

LOAD = """
import sys
from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.planner import Planner
try:
    Planner.from_pretrained(sys.argv[1])
except CheckpointError as exc:
    print(exc)
    sys.exit(2)
"""


def offline_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HTTPS_PROXY="http://10.255.255.1:9", HTTP_PROXY="http://10.255.255.1:9",
               HF_HOME=str(tmp_path / "hf"))
    return env


def test_unknown_names_are_refused_without_a_hub(tmp_path):
    for name in ("someone/some-model", "no-such-preset", "Qwen/Qwen3-VL-2B-Instruct"):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-c", LOAD, name], capture_output=True,
                              text=True, timeout=120, env=offline_env(tmp_path))
        assert done.returncode == 2, done.stderr[-2000:]
        assert name in done.stdout and "Traceback" not in done.stderr
        assert time.monotonic() - start < 60
    assert not (tmp_path / "hf").exists()          # nothing was fetched or cached


def test_the_bundled_model_loads_offline(tmp_path):
    done = subprocess.run([sys.executable, "-c", LOAD.replace("sys.argv[1]", "None")],
                          capture_output=True, text=True, timeout=300,
                          env=offline_env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("name", ["tokenizer_config.json", "generation_config.json",
                                  "tokenizer.json", "config.json",
                                  "wamdiff2_processor.json"])
@pytest.mark.parametrize("kind", ["deep", "fifo", "dev zero"])
def test_hostile_checkpoint_files_are_one_sentence(tmp_path, name, kind):
    from wamdiff2_core.model.checkpoint import CheckpointError
    from wamdiff2_core.planner import Planner

    model = tmp_path / "model"
    shutil.copytree(BUNDLED, model, ignore=shutil.ignore_patterns("ar_teacher", "*.md"))
    target = model / name
    target.unlink()
    if kind == "deep":
        target.write_text("[" * 200000)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    start = time.monotonic()
    with pytest.raises(CheckpointError) as info:
        Planner.from_pretrained(model)
    text = str(info.value)
    assert name in text and "\n" not in text, text
    assert {"deep": "levels deep", "fifo": "FIFO", "dev zero": "character device"}[kind] \
        in text
    assert time.monotonic() - start < 30
