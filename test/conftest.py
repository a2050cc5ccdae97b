"""Shared pytest set-up: slow and GPU tests are skipped with a reason, never silently; the
helper modules in test/helpers (fixtures data, ROS harness) import from any test folder."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))

# A suite started in the background of a non-interactive shell (`nohup bash -c '...' &`, some
# CI runners) inherits SIGINT ignored, and every process it starts would inherit that too:
# the tests that press Ctrl-C on a tool (bag eval, bag replay) then watched it run on. A
# caught signal is reset to the default at exec, so catching SIGINT here, as an interactive
# Python does, gives every child its Ctrl-C back. An ignored SIGINT is the caller's choice
# for the tools themselves (POSIX background jobs), so they are left to honour it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture
def data_dir(tmp_path):
    """A tiny generated-format data set: 2 planning, 2 detection, 2 QA records."""
    from eval_data import write_data_dir

    return write_data_dir(tmp_path / "data")


# ------------------------------------------------------------ tiny models and inputs
@pytest.fixture(scope="session")
def tiny_diffusion():
    """An untrained tiny block-diffusion model (block 4)."""
    from wamdiff2_core.model.modeling import Wamdiff2Model

    return Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4, seed=0)


@pytest.fixture(scope="session")
def tiny_ar():
    """An untrained tiny next-token model."""
    from wamdiff2_core.model.modeling import Wamdiff2Model

    return Wamdiff2Model.from_preset("tiny", paradigm="ar", seed=1)


@pytest.fixture(scope="session")
def camera_images():
    import numpy as np

    rng = np.random.RandomState(0)
    return [(rng.rand(96, 160, 3) * 255).astype(np.uint8) for _ in range(4)]


@pytest.fixture(scope="session")
def prompts():
    from wamdiff2_core import tasks

    return [tasks.planning_prompt("left", (10.0, 0.2), (0.5, 0.0)),
            tasks.qa_prompt("Is the left lane free?"),
            tasks.detection_prompt(),
            tasks.planning_prompt("straight", (3.0, 0.0), (-1.0, 0.1))]
