"""1 process and 2 processes (torchrun, gloo, DDP) with the same global batch give the same
losses: each process takes its slice of the same global batch, gradients are all-reduced."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wamdiff2_core.training.metrics import read_metrics
from conftest import tiny_overrides
from torchrun import free_port

VENV_BIN = Path(sys.executable).parent


def run_cli(prefix: list[str], args: list[str], timeout: int = 300):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(prefix + ["-m", "wamdiff2_core.cli", "train", "--config",
                                    "block4.yaml"] + args, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_one_and_two_processes_give_the_same_losses(tmp_path, toy_data):
    common = ["train.steps=3", "train.global_batch=4", "train.threads=1",
              "output.log_every=1", "data.limit=8"]
    one = tmp_path / "one"
    run_cli([sys.executable], tiny_overrides(toy_data, one) + common + ["train.micro_batch=2"])
    two = tmp_path / "two"
    proc = run_cli([str(VENV_BIN / "torchrun"), "--nproc_per_node", "2",
                    "--master_addr", "127.0.0.1", "--master_port", str(free_port())],
                   tiny_overrides(toy_data, two) + common + ["train.micro_batch=2"])
    assert "2 process(es) [ddp]" in proc.stdout
    a, b = read_metrics(one), read_metrics(two)
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3]
    for ra, rb in zip(a, b):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4, abs=1e-5)
        assert rb["grad_norm"] == pytest.approx(ra["grad_norm"], rel=1e-3)
    # the one-process run accumulated two micro-batches; the two-process run did not
    assert a[0]["loss"] != a[1]["loss"]
