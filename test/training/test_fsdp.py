"""FSDP2 on this CPU (torchrun, gloo, two processes, the tiny preset): the same losses as one
process, sharded checkpoints that resume at another number of processes (2 -> 1, 1 -> 2)
and, after a SIGKILL in the middle of a save, exactly at the same one (mid-epoch: the same
loss curve and final weights), memory as planned, no pickle anywhere."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_overrides
from processes import descendants
from safetensors import safe_open
from safetensors.torch import load_file
from torchrun import VENV_BIN, env, free_port, run_train, train_command

from wamdiff2_core.training import checkpoint as ckpt
from wamdiff2_core.training.metrics import read_metrics

STEPS = 5
COMMON = [f"train.steps={STEPS}", "output.save_every=2", "output.keep_last=3",
          "output.log_every=1", "data.limit=8", "train.threads=1", "train.global_batch=4",
          "train.micro_batch=2"]


def args(data, out, *extra: str) -> list[str]:
    return tiny_overrides(data, out) + COMMON + list(extra)


def losses(out) -> dict[int, float]:
    return {int(r["step"]): r["loss"] for r in read_metrics(out)}


def _gap(a: dict, b: dict) -> float:
    return max(abs(a[k] - b[k]) for k in b)


def weights(final) -> dict[str, torch.Tensor]:
    return load_file(str(final / "model.safetensors"))


def resumed_from(src, step: int, dst):
    """A run directory holding only checkpoint ``step`` of run ``src``."""
    name = ckpt.step_dir_name(step)
    (dst / "checkpoints").mkdir(parents=True)
    shutil.copytree(src / "checkpoints" / name, dst / "checkpoints" / name)
    return dst


@pytest.fixture(scope="module")
def one(tmp_path_factory, toy_data):
    """One process (two accumulation micro-steps per step)."""
    out = tmp_path_factory.mktemp("one") / "run"
    run_train(args(toy_data, out))
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory, toy_data):
    """Two processes under FSDP2, the same global batch."""
    out = tmp_path_factory.mktemp("two") / "run"
    proc = run_train(args(toy_data, out, "train.strategy=fsdp"), nproc=2)
    assert "2 process(es) [fsdp]" in proc.stdout
    return out


def test_fsdp_losses_equal_one_process(one, two):
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for row in read_metrics(two):                   # throughput of every logged step
        assert row["tokens_per_s"] > 0 and row["samples_per_s"] > 0 and "mfu" not in row
    for step in a:
        assert b[step] == pytest.approx(a[step], abs=1e-5), step
    wa, wb = weights(one / "final"), weights(two / "final")
    assert wa.keys() == wb.keys()
    gap = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert gap < 1e-4
    print(f"\nFSDP2 (2 processes) vs 1 process, {STEPS} steps: max |loss difference| "
          f"{_gap(a, b):.1e}, max |final weight difference| {gap:.1e}")


def test_memory_measured_equals_the_plan(two):
    report = json.loads((two / "memory.json").read_text())
    assert report["strategy"] == "fsdp" and report["world_size"] == 2
    assert report["as_planned"]
    ranks = report["ranks"]
    print("\nmeasured = planned bytes (parameters, gradients, optimizer) per process:",
          [[r["measured"][k] for k in ("parameters", "gradients", "optimizer")] for r in ranks])
    for r in ranks:
        for key in ("parameters", "gradients", "optimizer"):
            assert r["measured"][key] == r["planned"][key] > 0, key
    # each process holds about half (rank 0 the larger half of every odd row count)
    whole = sum(r["measured"]["parameters"] for r in ranks)
    assert ranks[0]["measured"]["parameters"] >= ranks[1]["measured"]["parameters"] > 0.45 * whole


def test_checkpoints_are_sharded_json_and_safetensors_never_pickle(one, two):
    for run, world in ((one, 1), (two, 2)):
        for _, path in ckpt.list_checkpoints(run):
            assert len(list((path / ckpt.SHARDS_DIR).glob("*.safetensors"))) == world
            state = json.loads((path / ckpt.STATE_FILE).read_text())
            assert state["world_size"] == world and state["data"]["samples_seen"] > 0
        for f in run.rglob("*"):
            if not f.is_file() or f.parent.name == "tb":
                continue
            head = f.read_bytes()[:4]
            assert head[:1] != b"\x80" and head != b"PK\x03\x04", f       # pickle, torch zip
            assert f.suffix not in (".pt", ".pth", ".bin", ".pkl", ".ckpt"), f
            if f.suffix == ".safetensors":
                with safe_open(str(f), framework="pt") as handle:
                    assert list(handle.keys())
            elif f.suffix == ".json":
                json.loads(f.read_text())


@pytest.mark.parametrize("saved_by,resumed_by", [(2, 1), (1, 2)])
def test_resume_at_another_number_of_processes(one, two, toy_data, tmp_path, saved_by,
                                               resumed_by):
    src = two if saved_by == 2 else one
    run = resumed_from(src, 2, tmp_path / "run")
    extra = ["train.strategy=fsdp"] if resumed_by == 2 else []
    proc = run_train(args(toy_data, run, *extra), nproc=resumed_by, resume=True)
    assert f"at step 2 (written by {saved_by} processes)" in proc.stdout
    want, got = losses(src), losses(run)
    assert sorted(got) == list(range(3, STEPS + 1))
    for step in got:
        assert got[step] == pytest.approx(want[step], abs=1e-5), step
    print(f"\nsaved by {saved_by} process(es), resumed by {resumed_by}: max |loss difference| "
          f"{_gap(want, got):.1e}")


SLOW_SAVE = str(Path(__file__).parent / "slow_save")


def test_kill_mid_save_resumes_exactly_from_the_previous_checkpoint(two, toy_data, tmp_path):
    run = tmp_path / "run"
    pending = run / "checkpoints" / ".tmp-step-00000004"
    cmd = train_command(args(toy_data, run, "train.strategy=fsdp"), nproc=2)
    proc = subprocess.Popen(cmd, env=env(PYTHONPATH=SLOW_SAVE,
                                         WAMDIFF2_TEST_SLOW_SAVE=pending.name),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(list((pending / ckpt.SHARDS_DIR).glob("*.safetensors"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    for pid in [*descendants(proc.pid), proc.pid]:    # every process of the job, at once
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [2]
    assert pending.is_dir() and not (pending / ckpt.STATE_FILE).exists()
    state = ckpt.read_state(run / "checkpoints" / ckpt.step_dir_name(2))
    assert 0 < state["data"]["batch"] < state["data"]["batches_per_epoch"]   # mid-epoch

    out = run_train(args(toy_data, run, "train.strategy=fsdp"), nproc=2, resume=True)
    assert f"resumed from {run / 'checkpoints' / 'step-00000002'} at step 2" in out.stdout
    assert losses(run) == losses(two)                       # the whole curve, exactly
    want, got = weights(two / "final"), weights(run / "final")
    assert all(torch.equal(want[k], got[k]) for k in want)
    print("\nSIGKILL in the middle of a save, resumed at 2 processes: loss curve and final "
          "weights bit-identical to the uninterrupted run")
    assert not pending.exists()                             # cleaned up by the new save
    assert [s for s, _ in ckpt.list_checkpoints(run)] == [2, 4, STEPS]


def test_two_nodes_on_the_loopback_address_train_and_save(two, toy_data, tmp_path):
    """torchrun's multi-node launch (c10d rendezvous), two "nodes" of one process each, with
    activation checkpointing on: the same losses as the one-node run without it."""
    out = tmp_path / "run"
    port = free_port()
    node = [str(VENV_BIN / "torchrun"), "--nnodes", "2", "--nproc_per_node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", f"wamdiff2-test-{port}", "-m", "wamdiff2_core.cli", "train",
            "--config", "block4.yaml", *args(toy_data, out, "train.strategy=fsdp",
                                             "train.activation_checkpointing=true",
                                             "train.steps=2")]
    nodes = [subprocess.Popen(node, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], [e[-3000:] for _, e in results]
    assert any("2 process(es) [fsdp, activation checkpointing]" in o for o, _ in results)
    saved = ckpt.latest_checkpoint(out)
    assert saved.name == ckpt.step_dir_name(2)
    assert len(list((saved / ckpt.SHARDS_DIR).glob("*.safetensors"))) == 2
    assert (out / "final" / "model.safetensors").is_file()
    got, want = losses(out), losses(two)        # steps 1-2 do not depend on train.steps
    for step in (1, 2):
        assert got[step] == pytest.approx(want[step], abs=1e-6), step
    print(f"\ntwo nodes with activation checkpointing vs one node without: max |loss "
          f"difference| {_gap(want, got):.1e}")
