"""`train --resume` over a damaged newest checkpoint (issue 17, item 6; sharded since issue
44): a truncated, missing or garbled shard, a garbage or missing trainer state fall back to
the previous complete checkpoint with a warning and continue the same loss curve; with no
complete checkpoint left, resuming is an error, never a silent restart at step 0."""
from __future__ import annotations

import shutil

import pytest
from conftest import tiny_overrides
from refusals import assert_one_sentence

from wamdiff2_core.apps.cli import main
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.metrics import read_metrics

STEPS = 4


def argv(data, out, resume: bool = False, keep_last: int = 3) -> list[str]:
    return (["train", "--config", "block4.yaml"] + (["--resume"] if resume else [])
            + tiny_overrides(data, out) + [f"train.steps={STEPS}", "output.save_every=2",
                                           f"output.keep_last={keep_last}", "data.limit=6"])


@pytest.fixture(scope="module")
def finished(tmp_path_factory, toy_data):
    """A finished run with checkpoints at steps 2 and 4, and its loss curve."""
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(argv(toy_data, out)) == 0
    return out, {int(r["step"]): r["loss"] for r in read_metrics(out)}


def _truncate(path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _garble(path) -> None:
    path.write_bytes(b"\xff" * path.stat().st_size)      # the same size, no header


def _shard(c):
    return sorted((c / ckpt.SHARDS_DIR).glob("*.safetensors"))[0]


DAMAGE = {
    "truncated shard": (lambda c: _truncate(_shard(c)), "bytes,"),
    "missing shard": (lambda c: _shard(c).unlink(), "is missing"),
    "garbled shard": (lambda c: _garble(_shard(c)), "cannot be read"),
    "garbage trainer state": (lambda c: (c / ckpt.STATE_FILE).write_bytes(b"\x00{garbage"),
                              "trainer_state.json is not valid JSON"),
    "missing trainer state": (lambda c: (c / ckpt.STATE_FILE).unlink(),
                              "it has no trainer_state.json"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_newest_checkpoint_falls_back_to_the_previous(finished, toy_data, tmp_path,
                                                              capsys, damage):
    done, want = finished
    run = tmp_path / "run"
    shutil.copytree(done, run)
    shutil.rmtree(run / "final")
    newest = run / "checkpoints" / ckpt.step_dir_name(STEPS)
    hurt, phrase = DAMAGE[damage]
    hurt(newest)
    capsys.readouterr()
    assert main(argv(toy_data, run, resume=True)) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines()
                if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1 and str(newest) in warnings[0] and phrase in warnings[0], \
        captured.err[-2000:]
    assert "Traceback" not in captured.err
    previous = run / "checkpoints" / ckpt.step_dir_name(STEPS - 2)
    assert f"resumed from {previous} at step {STEPS - 2}" in captured.out
    got = {int(r["step"]): r["loss"] for r in read_metrics(run)}
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)       # the same curve
    ckpt.read_resume_state(newest)                              # rewritten whole
    assert (run / "final" / "config.json").exists()


def test_missing_trainer_state_without_an_older_checkpoint_is_an_error(finished, toy_data,
                                                                      tmp_path, capsys):
    done, _ = finished
    run = tmp_path / "run"
    shutil.copytree(done, run)
    shutil.rmtree(run / "final")
    for step, path in ckpt.step_dirs(run)[:-1]:
        shutil.rmtree(path)                                     # only the newest is left
    newest = run / "checkpoints" / ckpt.step_dir_name(STEPS)
    state = (newest / ckpt.STATE_FILE).read_bytes()
    (newest / ckpt.STATE_FILE).unlink()
    rows = (run / "metrics.csv").read_text()
    capsys.readouterr()
    code = main(argv(toy_data, run, resume=True, keep_last=1))
    assert_one_sentence(code, capsys.readouterr().err, f"cannot resume {run}",
                        "no checkpoint is complete", "it has no trainer_state.json")
    assert (run / "metrics.csv").read_text() == rows          # nothing restarted at step 0
    assert not (run / "final").exists()
    # without --resume the run is not silently overwritten either
    code = main(argv(toy_data, run, keep_last=1))
    assert_one_sentence(code, capsys.readouterr().err, "already holds checkpoints")
    (newest / ckpt.STATE_FILE).write_bytes(state)               # the good input resumes
    assert main(argv(toy_data, run, resume=True, keep_last=1)) == 0
    assert f"resumed from {newest} at step {STEPS}" in capsys.readouterr().out
