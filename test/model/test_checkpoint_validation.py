"""A checkpoint never loads as something it is not (issue 17): a config that is `{}` or a
list, tensors missing, unexpected or of the wrong shape, missing shards, truncated weights,
no processor file: each is refused before a weight is allocated, with one sentence, and a good
checkpoint still loads afterwards. `{}` is refused fast and small through every entry point
(`wamdiff2 plan`, `model.init` of a recipe; the node's `checkpoint` parameter is tested in
test/ros/node/test_ros_checkpoint.py)."""
import json
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import load_file, save_file

from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model
from wamdiff2_core.planner import Planner

MAX_SECONDS, MAX_RSS_MB = 10.0, 2048
# Runs a command as its only child and reports the child's peak RSS (ru_maxrss, KiB).
_MEASURE = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps({'rc': p.returncode, 'err': p.stderr, 's': time.perf_counter() - t,"
            " 'rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "ck"
    Wamdiff2Model.from_preset("tiny", block_size=4, seed=5).save_pretrained(path)
    return path


def _copy(good, tmp_path, name="bad"):
    out = tmp_path / name
    shutil.copytree(good, out)
    return out


def _refused(path, *match) -> str:
    with pytest.raises(CheckpointError) as err:
        Wamdiff2Model.from_pretrained(path)
    message = str(err.value)
    for m in match:
        assert m in message, message
    assert "\n" not in message and message.count(". ") == 0, message      # one sentence
    return message


def _still_loads(good):
    model = Wamdiff2Model.from_pretrained(good)
    assert model.fields.block_size == 4


@pytest.mark.parametrize("config, match", [
    ({}, "no model_type"),
    ([1, 2], "must hold a JSON object"),
    ({"model_type": "llama"}, "model_type 'llama'"),
    ({"model_type": "qwen3_vl"}, "no text_config"),
])
def test_config_that_is_not_a_qwen3_vl_one_is_refused(good, tmp_path, config, match):
    bad = _copy(good, tmp_path)
    (bad / "config.json").write_text(json.dumps(config))
    _refused(bad, match)
    _still_loads(good)


def test_config_leaving_a_shape_to_defaults_is_refused(good, tmp_path):
    bad = _copy(good, tmp_path)
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["text_config"]["hidden_size"]
    (bad / "config.json").write_text(json.dumps(cfg))
    _refused(bad, "text_config.hidden_size", "default size")
    _still_loads(good)


def test_config_of_another_size_than_its_weights_is_refused(good, tmp_path):
    bad = _copy(good, tmp_path)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["text_config"]["intermediate_size"] = 1024               # the weights have 512
    (bad / "config.json").write_text(json.dumps(cfg))
    message = _refused(bad, "another shape than the config says", "mlp",
                       "[192, 512] in model.safetensors, config [192, 1024]")
    assert "tensors" in message
    _still_loads(good)


def test_missing_tensors_are_named_not_initialised(good, tmp_path):
    bad = _copy(good, tmp_path)
    weights = load_file(bad / "model.safetensors")
    names = sorted(weights)
    dropped = names[::2]
    save_file({k: v for k, v in weights.items() if k not in dropped}, bad / "model.safetensors")
    message = _refused(bad, f"{len(dropped)} of the {len(names)} tensors", dropped[0],
                       "missing")
    assert f"and {len(dropped) - 4} more)" in message
    _still_loads(good)


def test_unexpected_tensors_are_named(good, tmp_path):
    bad = _copy(good, tmp_path)
    weights = load_file(bad / "model.safetensors")
    weights["model.language_model.layers.99.mlp.up_proj.weight"] = weights[
        "model.language_model.layers.0.mlp.up_proj.weight"].clone()
    save_file(weights, bad / "model.safetensors")
    _refused(bad, "1 tensors are not part of the model", "layers.99.mlp.up_proj.weight")
    _still_loads(good)


def test_truncated_weights_and_missing_shards_are_refused(good, tmp_path):
    bad = _copy(good, tmp_path)
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[:len(data) // 2])
    _refused(bad, "model.safetensors is truncated")
    sharded = _copy(good, tmp_path, "sharded")
    weights = load_file(sharded / "model.safetensors")
    (sharded / "model.safetensors").unlink()
    keys = sorted(weights)
    save_file({k: weights[k] for k in keys[:10]}, sharded / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {k: ("model-00001-of-00002.safetensors" if i < 10
                                                else "model-00002-of-00002.safetensors")
                                            for i, k in enumerate(keys)}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(sharded, "missing 1 of its 2 weight shards", "model-00002-of-00002.safetensors")
    _still_loads(good)


def test_processor_files_are_required(good, tmp_path, caplog):
    bad = _copy(good, tmp_path)
    (bad / "wamdiff2_processor.json").unlink()
    # preprocessor_config.json (written beside it) still says how images are preprocessed:
    # loaded, with a warning naming the file used.
    with caplog.at_level("WARNING", logger="wamdiff2.model"):
        model = Wamdiff2Model.from_pretrained(bad)
    assert "preprocessor_config.json" in caplog.text
    assert model.processor.config == Wamdiff2Model.from_pretrained(good).processor.config
    (bad / "preprocessor_config.json").unlink()
    _refused(bad, "neither wamdiff2_processor.json nor preprocessor_config.json")
    _still_loads(good)


def test_pickle_next_to_nothing_else_is_refused(good, tmp_path):
    bad = _copy(good, tmp_path)
    (bad / "model.safetensors").rename(bad / "pytorch_model.bin")
    _refused(bad, "pickle")


# ------------------------------------------------------------------ `{}`: fast and small
def _measure(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, *args], capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout)


def _empty_config(good, tmp_path):
    bad = _copy(good, tmp_path, "empty_config")
    (bad / "config.json").write_text("{}")
    return bad


def test_empty_config_fails_fast_and_small_in_plan(good, tmp_path):
    bad = _empty_config(good, tmp_path)
    image = tmp_path / "frame.png"
    Image.fromarray(np.zeros((90, 160, 3), np.uint8)).save(image)
    cli = [sys.executable, "-m", "wamdiff2_core.cli", "plan", "--image", str(image)]
    r = _measure(cli + ["--checkpoint", str(bad)])
    assert r["rc"] == 2, r["err"]
    lines = r["err"].strip().splitlines()
    assert len(lines) == 1 and "no model_type" in lines[0], r["err"]
    assert r["s"] < MAX_SECONDS and r["rss_mb"] < MAX_RSS_MB, r
    ok = subprocess.run(cli + ["--checkpoint", str(good), "--json"], capture_output=True,
                        text=True, timeout=300)
    assert ok.returncode in (0, 1) and json.loads(ok.stdout)["ok"] in (True, False)


def test_empty_config_fails_fast_and_small_as_model_init(good, tmp_path, data_dir):
    bad = _empty_config(good, tmp_path)
    train = [sys.executable, "-m", "wamdiff2_core.cli", "train", "--config", "stage0_ar.yaml",
             f"data.path={data_dir}", "train.steps=1", "train.global_batch=2",
             "train.micro_batch=2", "output.progress=false"]
    t0 = time.perf_counter()
    r = _measure(train + [f"model.init={bad}", f"output.dir={tmp_path / 'run_bad'}"])
    assert r["rc"] == 2, r["err"]
    assert "no model_type" in r["err"] and len(r["err"].strip().splitlines()) == 1, r["err"]
    assert r["s"] < MAX_SECONDS and r["rss_mb"] < MAX_RSS_MB, r
    assert not (tmp_path / "run_bad" / "checkpoints").exists()
    ok = subprocess.run(train + [f"model.init={good}", f"output.dir={tmp_path / 'run_ok'}"],
                        capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert time.perf_counter() - t0 > 0
    assert Planner.from_pretrained(tmp_path / "run_ok" / "final").model.fields.paradigm == "ar"
