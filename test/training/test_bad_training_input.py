"""Bad training input fails at start with one sentence and a non-zero exit (issue 17, items
2 and 6): batch sizes that used to exhaust memory or divide by zero, numbers that are not
finite or out of range, an output.dir that is a file, a train.json that is not JSON, images
that are truncated, corrupt or bombs; and a model that turns the loss NaN stops the run
instead of writing a NaN model. After each refusal the good input trains."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from conftest import tiny_overrides
from PIL import Image
from refusals import assert_one_sentence, run_measured

from wamdiff2_core.apps.cli import main
from wamdiff2_core.training.config import Recipe
from wamdiff2_core.training.validate import NUMERIC_RANGES, numeric_fields


def train_argv(data, out, *extra: str) -> list[str]:
    return ["train", "--config", "block4.yaml", *tiny_overrides(data, out),
            "train.steps=1", "data.limit=4", *extra]


def assert_trains(data, out, capsys) -> None:
    """The next good input works: one step, a final model."""
    assert main(train_argv(data, out)) == 0, capsys.readouterr().err[-2000:]
    assert (out / "final" / "config.json").exists()


def test_batch_sizes_that_ran_out_of_memory_fail_fast_and_small(toy_data, tmp_path, capsys):
    # global_batch=-4 grew a list until the kernel killed the process; 0 divided by zero
    for value in (-4, 0):
        got = run_measured(train_argv(toy_data, tmp_path / "out",
                                      f"train.global_batch={value}"), timeout=120)
        assert_one_sentence(got.rc, got.stderr, "train.global_batch must be an integer in "
                                                f"[1, 65536], got {value}")
        print(f"global_batch={value}: refused in {got.seconds:.2f} s, peak RSS "
              f"{got.peak_mb:.0f} MB")
        assert got.seconds < 10 and got.peak_mb < 2048
    assert not (tmp_path / "out").exists()
    assert_trains(toy_data, tmp_path / "out", capsys)


def test_every_numeric_field_has_a_range():
    recipe = Recipe()
    by_default = set()
    for section in dataclasses.fields(recipe):
        value = getattr(recipe, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            items = v if isinstance(v, tuple) and v else (v,)
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
                by_default.add(f"{section.name}.{f.name}")
    assert by_default == set(NUMERIC_RANGES) == set(numeric_fields())


BAD_NUMBERS = [
    ("optim.lr=nan", "optim.lr must be a finite number in (0, 1], got nan"),
    ("optim.lr=.inf", "optim.lr must be a finite number in (0, 1], got inf"),
    ("optim.lr=-1e-3", "optim.lr must be a finite number in (0, 1], got -0.001"),
    ("optim.grad_clip=nan", "optim.grad_clip must be a finite number >= 0, got nan"),
    ("optim.weight_decay=-0.1", "optim.weight_decay must be a finite number in [0, 1]"),
    ("optim.betas=[0.9]", "optim.betas must be 2 numbers, got [0.9]"),
    ("optim.betas=[1.5,0.9]", "optim.betas must be numbers each in [0, 1), got [1.5, 0.9]"),
    ("optim.betas=[0.9,nan]", "optim.betas must be numbers each in [0, 1)"),
    ("train.threads=-1", "train.threads must be an integer in [0, 1024], got -1"),
    ("train.micro_batch=0", "train.micro_batch must be an integer in [1, 65536], got 0"),
    ("train.seed=-1", "train.seed must be an integer in [0, 9223372036854775807], got -1"),
    ("noise.eps=0", "noise.eps must be a finite number in (0, 1), got 0.0"),
    ("distill.temperature=.inf", "distill.temperature must be a finite number in (0, 100]"),
    ("output.save_every=0", "output.save_every must be an integer >= 1, got 0"),
]


def test_bad_numbers_fail_at_start_with_one_sentence(toy_data, tmp_path, capsys):
    out = tmp_path / "out"
    for override, message in BAD_NUMBERS:
        code = main(train_argv(toy_data, out, override))
        assert_one_sentence(code, capsys.readouterr().err, message)
        assert not out.exists(), override
    assert_trains(toy_data, out, capsys)


def test_output_dir_that_is_a_file(toy_data, tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    code = main(train_argv(toy_data, blocker))
    assert_one_sentence(code, capsys.readouterr().err,
                        f"output.dir {blocker} is a file, not a folder")
    code = main(train_argv(toy_data, blocker / "run"))
    assert_one_sentence(code, capsys.readouterr().err, "cannot be created",
                        f"{blocker} is a file, not a folder")
    code = main(train_argv(toy_data, "/proc/wamdiff2-no-such-place/run"))   # issue 45
    assert_one_sentence(code, capsys.readouterr().err, "output.dir /proc/wamdiff2-no-such-"
                        "place/run cannot be written (in /proc)")
    assert blocker.read_text() == "not a folder"
    assert_trains(toy_data, tmp_path / "out", capsys)


@pytest.mark.parametrize("content,message", [
    (b"not json at all", "line 1 is not valid JSON"),
    (b"[" * 200000, "nests 200000 levels deep"),
    (b'{"records": [1, 2]}', "got a JSON object with keys ['records']"),
    (b'{\n "records": [1, 2]\n}', "got a JSON object with keys ['records']"),
    (b"[not json at all", "is not valid JSON"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe binary", "is not UTF-8 text"),
    (b"[1, 2]", "record 0 of"),
    (b'{"id": 1, "conversations": 5}', "record 0 of"),
])
def test_train_json_that_is_not_json(toy_data, tmp_path, capsys, content, message):
    bad = tmp_path / "data"
    shutil.copytree(toy_data, bad)
    (bad / "train.json").write_bytes(content)
    code = main(train_argv(bad, tmp_path / "out"))
    assert_one_sentence(code, capsys.readouterr().err, message, str(bad / "train.json"))
    assert not (tmp_path / "out").exists()
    assert_trains(toy_data, tmp_path / "out", capsys)


def bomb(path, side: int) -> None:
    """A side x side PNG of a few KB (10000: 100 M pixels, 300 MB decoded as RGB)."""
    Image.new("1", (side, side)).save(path)


@pytest.mark.parametrize("damage,message", [
    ("truncate", "is truncated or corrupt"),
    ("garbage", "is not an image file"),
    ("bomb", "10000x10000 = 100 M pixels, more than the limit of 40 M"),
    ("big bomb", "more than 179 M pixels, more than the limit of 40 M"),    # PIL's limit
])
def test_bad_images_are_found_at_start(toy_data, tmp_path, capsys, damage, message):
    bad = tmp_path / "data"
    shutil.copytree(toy_data, bad)
    victim = sorted((bad / "images").iterdir())[2]
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:300])
    elif damage == "garbage":
        victim.write_bytes(b"\x00" * 64)
    else:
        bomb(victim, 10000 if damage == "bomb" else 20000)
    got = run_measured(train_argv(bad, tmp_path / "out", "data.limit=0"), timeout=300)
    line = assert_one_sentence(got.rc, got.stderr, message, str(victim),
                               "1 of 6 images", "training does not start")
    assert "Traceback" not in got.stdout and not (tmp_path / "out").exists(), line
    assert got.peak_mb < 2048, got.peak_mb           # the bomb was never decoded
    assert_trains(toy_data, tmp_path / "out", capsys)


def test_a_model_that_makes_the_loss_nan_stops_without_saving(toy_data, tmp_path, capsys):
    from wamdiff2_core.model.modeling import Wamdiff2Model

    poisoned = tmp_path / "poisoned"
    model = Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4, seed=0)
    with torch.no_grad():      # finite weights (a NaN one is refused at load) that overflow
        next(model.hf.parameters()).fill_(3e38)
    model.save_pretrained(poisoned)
    out = tmp_path / "out"
    code = main(train_argv(toy_data, out, f"model.init={poisoned}", "output.save_every=1"))
    assert_one_sentence(code, capsys.readouterr().err, "training diverged at step 1",
                        "the loss is nan")
    assert not (out / "final").exists() and not (out / "checkpoints").exists()
    assert json.loads((poisoned / "config.json").read_text())     # the input is untouched
    assert_trains(toy_data, tmp_path / "good", capsys)


@pytest.mark.parametrize("extra,message", [
    (["train.strategy=none", "train.micro_batch=2"],
     "train.strategy=none cannot train with 2 processes"),
    (["train.global_batch=3", "train.micro_batch=1"],
     "train.global_batch=3 is not a multiple of train.micro_batch x processes = 1 x 2"),
])
def test_a_setting_two_processes_cannot_run_is_one_sentence(toy_data, tmp_path, extra,
                                                             message):
    from torchrun import run_train

    out = tmp_path / "out"
    proc = run_train(train_argv(toy_data, out, *extra)[3:], nproc=2, check=False)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "wamdiff2 train: error:" in ln]
    assert len(lines) == 1 and message in lines[0], proc.stderr[-3000:]   # said once
    assert "wamdiff2_core/" not in proc.stderr              # no worker's traceback
    assert not (out / "checkpoints").exists() and not (out / "final").exists()
