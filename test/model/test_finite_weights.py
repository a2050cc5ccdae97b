"""Poisoned weights are refused at load (issue 45): a checkpoint whose floating tensors hold a
NaN or an infinity is one sentence naming the tensor, from the library and with exit 2 from
the command line (`wamdiff2 plan`, `wamdiff2 eval open-loop`); large finite weights whose
sum overflows still load."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from poisoned_weights import poisoned_copy
from refusals import WAMDIFF2, assert_one_sentence, without_loading_bar

from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model, check_finite

DOWN = "model.language_model.layers.0.mlp.down_proj.weight"
NORM = "model.language_model.norm.weight"


def poisoned(tmp_path: Path, values: dict[str, float], dtype=None) -> Path:
    return poisoned_copy(tmp_path / "poisoned", values, dtype)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_element_names_its_tensor(tmp_path, value):
    path = poisoned(tmp_path, {DOWN: value})
    with pytest.raises(CheckpointError) as info:
        Wamdiff2Model.from_pretrained(path)
    assert str(info.value) == (f"checkpoint {path} holds non-finite weights (NaN or infinity) "
                               f"in 1 tensor(s): {DOWN}")


def test_several_poisoned_tensors_of_another_dtype(tmp_path):
    path = poisoned(tmp_path, {DOWN: float("nan"), NORM: float("inf")}, torch.bfloat16)
    with pytest.raises(CheckpointError, match=r"in 2 tensor\(s\): .*down_proj.*norm"):
        Wamdiff2Model.from_pretrained(path, dtype=torch.bfloat16)


def test_large_finite_weights_whose_sum_overflows_load():
    huge = torch.full((4, 4), 3.0e38)
    assert not torch.isfinite(huge.sum())
    check_finite([("huge", huge), ("ints", torch.arange(4))], "here")
    with pytest.raises(CheckpointError, match="in 1 tensor"):
        check_finite([("huge", huge), ("bad", torch.tensor([1.0, float("nan")]))], "here")


def test_the_command_line_exits_2_with_one_sentence(tmp_path):
    path = poisoned(tmp_path, {DOWN: float("nan")})
    image = tmp_path / "frame.png"
    Image.fromarray(np.zeros((36, 64, 3), np.uint8)).save(image)
    done = subprocess.run([WAMDIFF2, "plan", "--checkpoint", str(path), "--image", str(image)],
                          capture_output=True, text=True, timeout=300)
    assert_one_sentence(done.returncode, without_loading_bar(done.stderr), "non-finite weights",
                        DOWN)
    assert done.stdout == ""
    data = Path(__file__).resolve().parents[1] / "fixtures" / "bundle_answers"
    done = subprocess.run([WAMDIFF2, "eval", "open-loop", "--checkpoint", str(path), "--data",
                           str(data / "records.json"), "--out", str(tmp_path / "report"),
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert_one_sentence(done.returncode, without_loading_bar(done.stderr), "non-finite weights",
                        DOWN)
    assert not (tmp_path / "report").exists()
