"""Starting `wamdiff2 train` under torchrun in tests: each run on its own free port."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from predict_inputs import free_port

__all__ = ["VENV_BIN", "env", "free_port", "run_train", "train_command"]
VENV_BIN = Path(sys.executable).parent


def env(**extra: str) -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)


def train_command(args: list[str], nproc: int = 1, port: int | None = None,
                  resume: bool = False, config: str = "block4.yaml") -> list[str]:
    """`wamdiff2 train` in one process, or under torchrun with ``nproc`` processes."""
    tail = (["-m", "wamdiff2_core.cli", "train", "--config", config]
            + (["--resume"] if resume else []) + args)
    if nproc == 1:
        return [sys.executable] + tail
    return [str(VENV_BIN / "torchrun"), "--nproc_per_node", str(nproc), "--master_addr",
            "127.0.0.1", "--master_port", str(port or free_port())] + tail


def run_train(args: list[str], nproc: int = 1, resume: bool = False, timeout: int = 300,
              check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(train_command(args, nproc, resume=resume, **kw), env=env(),
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc
