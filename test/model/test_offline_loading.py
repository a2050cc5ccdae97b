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


#: each name refused in turn, in one process (imports once), with the seconds it took
REFUSE_EACH = """
import sys, time
from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.planner import Planner
for name in sys.argv[1:]:
    tic = time.monotonic()
    try:
        Planner.from_pretrained(name)
    except CheckpointError as exc:
        print(f"{time.monotonic() - tic:.1f} refused: {exc}", flush=True)
    else:
        print(f"loaded {name}", flush=True)
"""


def test_unknown_names_are_refused_without_a_hub(tmp_path):
    names = ("someone/some-model", "no-such-preset", "Qwen/Qwen3-VL-2B-Instruct")
    done = subprocess.run([sys.executable, "-c", REFUSE_EACH, *names], capture_output=True,
                          text=True, timeout=180, env=offline_env(tmp_path))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == len(names), done.stdout
    for name, line in zip(names, lines):
        seconds, verdict = line.split(" ", 1)
        assert verdict.startswith("refused: ") and name in verdict, line
        assert float(seconds) < 60, line
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
