"""`train` on a full disk (issue 17, item 7): one sentence, exit 1, no half-written
checkpoint or final model, and `--resume` trains once there is space. The disk is a real
tmpfs of 4 MB in a private mount namespace (test/helpers/tiny_disk.py)."""
from __future__ import annotations

import pytest
from conftest import tiny_overrides
from refusals import WAMDIFF2, assert_one_sentence
from tiny_disk import list_files_script, results, run_on_tiny_disk, sh, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def test_train_on_a_full_disk(toy_data, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "run"
    args = ["train", "--config", "block4.yaml", *tiny_overrides(toy_data, run),
            "train.steps=2", "output.save_every=1", "data.limit=4"]
    script = (f"{sh([WAMDIFF2, *args])} > /dev/null 2> {tmp_path}/err1; echo rc1=$?\n"
              + list_files_script(run, "left1")
              + f"cat {run}/recipe.yaml > {tmp_path}/recipe.yaml\n"
              + "remount 256m\n"
              + f"{sh([WAMDIFF2, *args, '--resume'])} > {tmp_path}/out2 2>&1; echo rc2=$?\n"
              + list_files_script(run, "left2"))
    done = run_on_tiny_disk(script, str(disk), "4m")     # the 14 MB weights cannot fit
    got = results(done.stdout)
    assert got.get("rc1") == "1", done.stdout + done.stderr
    err = (tmp_path / "err1").read_text()
    assert_one_sentence(1, err, "no space left on device", "nothing half-written was kept",
                        "--resume continues from the last complete checkpoint", code=1)
    left = got["left1"].split()
    assert "./checkpoints" in left and not any("step-" in p for p in left), left
    assert "./final" not in left and not any(p.endswith(".tmp") for p in left), left
    assert "objective: diffusion" in (tmp_path / "recipe.yaml").read_text()
    assert got.get("rc2") == "0", (tmp_path / "out2").read_text()[-3000:]
    assert "./final/model.safetensors" in got["left2"].split()
