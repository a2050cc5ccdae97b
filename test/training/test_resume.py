"""Kill a run (SIGKILL) mid-training, resume it, and the loss curve continues exactly; a
half-written checkpoint is never picked up."""
import os
import signal
import subprocess
import sys
import time

import pytest

from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.metrics import read_metrics
from conftest import tiny_overrides

STEPS = 8


def command(toy_data, out, resume=False):
    args = tiny_overrides(toy_data, out) + [f"train.steps={STEPS}", "output.save_every=2",
                                            "output.keep_last=3", "output.log_every=1",
                                            "data.limit=6", "train.threads=1"]
    return ([sys.executable, "-m", "wamdiff2_core.cli", "train", "--config", "block4.yaml"]
            + (["--resume"] if resume else []) + args)


def test_kill_resume_continues_the_same_curve(tmp_path, toy_data):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ref = tmp_path / "ref"
    subprocess.run(command(toy_data, ref), env=env, check=True, capture_output=True,
                   timeout=600)
    want = {int(r["step"]): r["loss"] for r in read_metrics(ref)}
    assert sorted(want) == list(range(1, STEPS + 1))

    run = tmp_path / "run"
    proc = subprocess.Popen(command(toy_data, run), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not (run / "checkpoints" / "step-00000004").exists():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    done = [s for s, _ in ckpt.list_checkpoints(run)]
    assert done and max(done) < STEPS
    # a half-written checkpoint of a later step, as a kill during a save leaves it
    tmp = run / "checkpoints" / ".tmp-step-00000006"
    (tmp / "model").mkdir(parents=True, exist_ok=True)
    (tmp / "trainer_state.json").write_text('{"step": 6')
    assert ckpt.latest_checkpoint(run).name == f"step-{max(done):08d}"

    out = subprocess.run(command(toy_data, run, resume=True), env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"resumed from {run / 'checkpoints' / f'step-{max(done):08d}'}" in out.stdout
    got = {int(r["step"]): r["loss"] for r in read_metrics(run)}
    assert sorted(got) == list(range(1, STEPS + 1))       # one continuous curve
    for step in range(1, STEPS + 1):
        assert got[step] == pytest.approx(want[step], rel=1e-5, abs=1e-6), step
    assert not tmp.exists()                                # cleaned up by a later save


def test_checkpoint_listing_ignores_temporaries_and_incomplete_dirs(tmp_path):
    root = tmp_path / "checkpoints"
    for name, state in [("step-00000002", True), ("step-00000004", False),
                        (".tmp-step-00000006", True), ("step-7", True)]:
        (root / name).mkdir(parents=True)
        if state:
            (root / name / ckpt.STATE_FILE).write_text("{}")
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2]


def test_atomic_dir_leaves_nothing_on_failure(tmp_path):
    def write(folder):
        (folder / "a").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        ckpt.atomic_dir(tmp_path / "final", write)
    assert not (tmp_path / "final").exists()
    ckpt.atomic_dir(tmp_path / "final", lambda f: (f / "b").write_text("y"))
    assert [p.name for p in (tmp_path / "final").iterdir()] == ["b"]


def test_resume_refuses_a_different_recipe(tmp_path, toy_data):
    from wamdiff2_core.training.config import RecipeError, build_recipe
    from wamdiff2_core.training.engine import Trainer, train

    args = tiny_overrides(toy_data, tmp_path) + ["train.steps=1", "data.limit=4"]
    train(build_recipe({}, args), log=lambda *a: None)
    with pytest.raises(RecipeError, match="recipe key 'optim.lr' was 0.001 and is now 0.002"):
        Trainer(build_recipe({}, args + ["optim.lr=2e-3"]), resume=True)
    Trainer(build_recipe({}, args + ["train.threads=1", "output.log_every=3"]), resume=True)


def test_a_recipe_key_added_since_the_checkpoint_is_the_same_run_only_at_its_default():
    """A checkpoint written before `data.image_root` existed resumes while the key is at its
    default; set to a folder, it is another run (its images may be other images)."""
    from wamdiff2_core.training.config import Recipe, RecipeError
    from wamdiff2_core.training.persist import check_same_run

    saved = Recipe().to_dict()
    del saved["data"]["image_root"]
    check_same_run(saved, Recipe().to_dict(), "ckpt")
    current = Recipe().to_dict()
    current["data"]["image_root"] = "/data/images"
    with pytest.raises(RecipeError, match="recipe key 'data.image_root' was None and is now "
                                          "'/data/images'"):
        check_same_run(saved, current, "ckpt")
