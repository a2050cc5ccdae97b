"""Checkpoint integrity (issue 54): every checkpoint carries a manifest of content hashes;
`train --resume` and `export` verify it and the trainer state's values, and a shard swapped
for a same-size shard of another step, edited metadata (re-sealed or not), a path leading
out of the checkpoint or a FIFO fall back to the newest intact checkpoint with one warning
naming what was wrong, or stop with one sentence where none is intact. An older checkpoint
without a manifest is accepted with a warning."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from conftest import tiny_overrides
from refusals import assert_one_sentence
from safetensors.torch import load_file

from wamdiff2_core.apps.cli import main
from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.checkpoint_check import MANIFEST_FILE, write_manifest

STEPS = 4


def argv(data, out, resume: bool = False) -> list[str]:
    return (["train", "--config", "block4.yaml"] + (["--resume"] if resume else [])
            + tiny_overrides(data, out) + [f"train.steps={STEPS}", "output.save_every=2",
                                           "output.keep_last=3", "data.limit=6"])


@pytest.fixture(scope="module")
def finished(tmp_path_factory, toy_data):
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(argv(toy_data, out)) == 0
    return out


def copy_run(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    shutil.rmtree(run / "final")
    return run, run / "checkpoints" / ckpt.step_dir_name(STEPS), \
        run / "checkpoints" / ckpt.step_dir_name(STEPS - 2)


def shard(step_dir):
    return sorted((step_dir / ckpt.SHARDS_DIR).glob("*.safetensors"))[0]


def edit_state(step_dir, change, reseal: bool = True) -> None:
    """Edit trainer_state.json; ``reseal``: write a matching manifest too, as a hand edit
    that knows about manifests would, so the schema is what must catch it."""
    path = step_dir / ckpt.STATE_FILE
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state) if not isinstance(state, str) else state)
    if reseal:
        write_manifest(step_dir)


def edit_rng(step_dir, change) -> None:
    path = step_dir / "rng-rank0.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))
    write_manifest(step_dir)


def _group(state, key, value):
    state["optimizer"]["param_groups"][0][key] = value


DAMAGE = {
    "shard of another step": (lambda new, old: shutil.copy(shard(old), shard(new)),
                              "has another content than was written"),
    "world_size abc": (lambda new, old: edit_state(new, lambda s: s.update(world_size="abc")),
                       "world_size must be a process count"),
    "world_size 1e400": (lambda new, old: (new / ckpt.STATE_FILE).write_text(
        (new / ckpt.STATE_FILE).read_text().replace('"world_size": 1', '"world_size": 1e400'))
        or write_manifest(new), "overflows a float"),
    "optimizer lr abc": (lambda new, old: edit_state(new, lambda s: _group(s, "lr", "abc")),
                         "lr must be a number"),
    "junk optimizer setting": (lambda new, old: edit_state(
        new, lambda s: _group(s, "foo", {"a": [1]})), "foo must be a plain value"),
    "junk scheduler": (lambda new, old: edit_state(
        new, lambda s: s["scheduler"].update(optimizer="junk")), "unknown key 'optimizer'"),
    "scheduler base_lrs": (lambda new, old: edit_state(
        new, lambda s: s["scheduler"].update(base_lrs="x")), "base_lrs must be a list"),
    "shard path ../": (lambda new, old: edit_state(new, lambda s: s.update(shards={
        f"../../{old.name}/shards/{shard(old).name}": shard(old).stat().st_size})),
        "is not a shard file name inside the checkpoint"),
    "cut RNG array": (lambda new, old: edit_rng(new, lambda m: m["numpy"][1].pop()),
                      "its RNG state of rank 0 cannot be read"),
    "overflowing RNG array": (lambda new, old: edit_rng(
        new, lambda m: m["python"][1].__setitem__(0, 2 ** 70)), "RNG state"),
    "edited without a new manifest": (lambda new, old: edit_state(
        new, lambda s: _group(s, "lr", 0.5), reseal=False), "trainer_state.json has"),
    "deeply nested state": (lambda new, old: (new / ckpt.STATE_FILE).write_text("[" * 200000)
                            or write_manifest(new), "levels deep"),
    "FIFO RNG file": (lambda new, old: ((new / "rng-rank0.json").unlink(),
                                        os.mkfifo(new / "rng-rank0.json")), "FIFO"),
    "a file added": (lambda new, old: (new / ckpt.MODEL_DIR / "extra.pkl").write_bytes(b"x"),
                     "which its manifest.json does not list"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_newest_checkpoint_falls_back_on_resume(finished, toy_data, tmp_path, capsys,
                                                        damage):
    run, newest, previous = copy_run(finished, tmp_path)
    hurt, phrase = DAMAGE[damage]
    hurt(newest, previous)
    capsys.readouterr()
    assert main(argv(toy_data, run, resume=True)) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    warnings = [line for line in captured.err.splitlines()
                if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1 and str(newest) in warnings[0] and phrase in warnings[0], \
        captured.err[-2000:]
    assert f"resumed from {previous} at step {STEPS - 2}" in captured.out
    ckpt.read_resume_state(newest)                              # rewritten whole


@pytest.mark.parametrize("damage", ["shard of another step", "optimizer lr abc",
                                    "a file added"])
def test_export_verifies_and_falls_back(finished, tmp_path, capsys, damage):
    run, newest, previous = copy_run(finished, tmp_path)
    DAMAGE[damage][0](newest, previous)
    code = main(["export", str(newest), str(tmp_path / "one")])
    assert_one_sentence(code, capsys.readouterr().err, f"cannot export {newest}",
                        DAMAGE[damage][1])
    assert not (tmp_path / "one").exists()
    assert main(["export", str(run), str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"warning: checkpoint {newest} is damaged" in err and "Traceback" not in err
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert main(["export", str(previous), str(tmp_path / "want")]) == 0
    want = load_file(str(tmp_path / "want" / "model.safetensors"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


def test_no_intact_checkpoint_is_one_sentence(finished, toy_data, tmp_path, capsys):
    run, newest, previous = copy_run(finished, tmp_path)
    shutil.copy(shard(previous), shard(newest))
    edit_state(previous, lambda s: s.update(step=-3))
    rows = (run / "metrics.csv").read_text()
    capsys.readouterr()
    code = main(argv(toy_data, run, resume=True))
    assert_one_sentence(code, capsys.readouterr().err, f"cannot resume {run}",
                        "no checkpoint is complete", "has another content",
                        "step must be a count")
    assert (run / "metrics.csv").read_text() == rows
    code = main(["export", str(run), str(tmp_path / "out")])
    assert_one_sentence(code, capsys.readouterr().err, "no checkpoint is intact")


def test_checkpoints_without_a_manifest_are_accepted_with_a_warning(finished, toy_data,
                                                                    tmp_path, capsys):
    run, newest, previous = copy_run(finished, tmp_path)
    for step_dir in (newest, previous):
        (step_dir / MANIFEST_FILE).unlink()
    capsys.readouterr()
    assert main(argv(toy_data, run, resume=True)) == 0
    captured = capsys.readouterr()
    assert f"warning: checkpoint {newest} has no manifest.json" in captured.err
    assert f"resumed from {newest} at step {STEPS}" in captured.out
    (newest / ckpt.MODEL_DIR / "config.json").write_text("[" * 200000)     # now unchecked
    code = main(["export", str(newest), str(tmp_path / "out")])
    assert_one_sentence(code, capsys.readouterr().err, "config.json", "levels deep")


def test_every_checkpoint_file_is_in_its_manifest(finished):
    for _, step_dir in ckpt.step_dirs(finished):
        listed = json.loads((step_dir / MANIFEST_FILE).read_text())["files"]
        on_disk = {p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*")
                   if p.is_file() and p.name != MANIFEST_FILE}
        assert set(listed) == on_disk and ckpt.STATE_FILE in listed
        assert ckpt.read_resume_state(step_dir).unverified is None


# ------------------------------------------------------------------------- export
def test_export_never_deletes_what_it_did_not_create(finished, tmp_path, capsys):
    run, newest, _ = copy_run(finished, tmp_path)
    out = tmp_path / "model"
    mine = tmp_path / ".tmp-model"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "keep.txt").write_text("mine")
    old = tmp_path / ".old-model"
    old.mkdir()
    (old / "keep.txt").write_text("mine too")
    out.mkdir()                                     # an empty target is replaced
    assert main(["export", str(newest), str(out)]) == 0
    assert (mine / "notes" / "keep.txt").read_text() == "mine"
    assert (old / "keep.txt").read_text() == "mine too"
    assert (out / "model.safetensors").is_file()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert leftovers == [".old-model", ".tmp-model"]


def test_export_copies_only_what_a_model_needs(finished, tmp_path, capsys):
    run, newest, _ = copy_run(finished, tmp_path)
    for step_dir in (newest,):
        (step_dir / ckpt.MODEL_DIR / "optimizer.pt").write_bytes(b"\x80\x04pickle")
        (step_dir / ckpt.MODEL_DIR / "run.py").write_text("print('hi')")
        (step_dir / MANIFEST_FILE).unlink()        # an older checkpoint, hand-extended
    capsys.readouterr()
    assert main(["export", str(newest), str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "optimizer.pt is not a file a planner-loadable model needs" in err
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert "optimizer.pt" not in names and "run.py" not in names
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= names
    assert not any(n.endswith((".pt", ".bin", ".pkl", ".pth", ".ckpt")) for n in names)


@pytest.mark.parametrize("target, phrase", [
    ("/proc/wamdiff2-no-such-place/model", "cannot be written"),
    ("{tmp}/file/model", "is a file, not a folder"),
    ("{tmp}/full", "already exists and is not empty"),
])
def test_export_target_problems_are_one_sentence_before_any_work(finished, tmp_path, capsys,
                                                                 target, phrase):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    _, newest, _ = copy_run(finished, tmp_path)
    code = main(["export", str(newest), target.format(tmp=tmp_path)])
    assert_one_sentence(code, capsys.readouterr().err, phrase)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_shard_of_another_run_is_refused(finished, toy_data, tmp_path_factory, tmp_path,
                                           capsys):
    other = tmp_path_factory.mktemp("other") / "run"
    assert main(argv(toy_data, other) + ["optim.lr=5e-4"]) == 0
    run, newest, previous = copy_run(finished, tmp_path)
    theirs = shard(other / "checkpoints" / ckpt.step_dir_name(STEPS))
    assert theirs.stat().st_size == shard(newest).stat().st_size      # same size, same name
    shutil.copy(theirs, shard(newest))
    capsys.readouterr()
    assert main(argv(toy_data, run, resume=True)) == 0
    captured = capsys.readouterr()
    assert "has another content than was written" in captured.err
    assert f"resumed from {previous} at step {STEPS - 2}" in captured.out
