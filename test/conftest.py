"""Shared pytest set-up: slow and GPU tests are skipped with a reason, never silently."""
from __future__ import annotations

import os

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    run_slow = os.environ.get("WAMDIFF2_SLOW") == "1"
    has_cuda = _has_cuda()
    skip_slow = pytest.mark.skip(
        reason="slow on the 2-core CI machine: set WAMDIFF2_SLOW=1 to run it")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)


# One torch thread per process: on the 2-core machines, two-thread matrix products stall for
# milliseconds whenever another process (a node under test, a subprocess) is busy, which made
# whole test files ten times slower. Subprocesses inherit the variable.
os.environ.setdefault("OMP_NUM_THREADS", "1")
