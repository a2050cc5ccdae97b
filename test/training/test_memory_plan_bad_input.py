"""`wamdiff2 memory-plan` with nonsense numbers and model names (issue 54): one sentence,
exit 2, no traceback, and never a model hub: an unknown name is refused at once with the
network unreachable (HF_HUB_OFFLINE unset)."""
from __future__ import annotations

import os

import pytest
from refusals import assert_one_sentence, run_measured

from wamdiff2_core.apps.cli import main

BASE = ["memory-plan", "--config", "block4.yaml", "--gpus", "1", "--cpu"]


@pytest.mark.parametrize("extra, phrase", [
    (["--images", "-5"], "--images must be in [0, 256], got -5"),
    (["--image-pixels", "-1000000"], "--image-pixels must be in [0, 4e+07]"),
    (["--tokens", "-402"], "--tokens must be in [0, 1.04858e+06]"),
    (["--tokens", "99999999999"], "--tokens must be in"),
    (["--gpu-memory", "nan"], "--gpu-memory must be in"),
    (["--gpu-memory", "-80"], "--gpu-memory must be in"),
    (["--gpu-memory", "1e300"], "--gpu-memory must be in"),
    (["--gpus", "0"], "--gpus must be in [1, 65536]"),
    (["--model", ""], "--model is empty"),
    (["--model", "   "], "--model is empty"),
    (["--model", "no-such-model"], "'no-such-model' is neither a preset"),
    (["--model", "Qwen/Qwen3-VL-2B-Instruct"], "names are not looked up on a model hub"),
    (["--teacher", ""], "--teacher is empty"),
])
def test_bad_plan_inputs_are_one_sentence(capsys, extra, phrase):
    code = main([*BASE, "--model", "tiny", *extra] if "--model" not in extra
                else [*BASE, *extra])
    assert_one_sentence(code, capsys.readouterr().err, phrase)


def test_a_recipe_without_a_model_is_one_sentence(capsys):
    code = main([*BASE, "model.init="])
    assert_one_sentence(code, capsys.readouterr().err, "--model is not given",
                        "the recipe's model.init is empty")


def test_unknown_model_name_never_reaches_the_network(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    # an unroutable proxy: a hub request would hang or fail slowly, not in a second
    env.update(HTTPS_PROXY="http://10.255.255.1:9", HTTP_PROXY="http://10.255.255.1:9",
               HF_HOME=str(tmp_path / "hf"))
    got = run_measured([*BASE, "--model", "someone/some-model"], timeout=120, env=env)
    assert_one_sentence(got.rc, got.stderr, "'someone/some-model' is neither a preset")
    assert got.seconds < 20 and not (tmp_path / "hf").exists()


def test_the_plan_still_plans_sane_numbers(capsys):
    assert main([*BASE, "--model", "tiny", "--images", "2", "--image-pixels", "50176",
                 "--tokens", "512", "--gpu-memory", "80"]) == 0
    assert "memory plan" in capsys.readouterr().out
