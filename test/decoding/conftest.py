import numpy as np
import pytest
import torch

from wamdiff2_core import tasks
from wamdiff2_core.model.modeling import Wamdiff2Model


@pytest.fixture(scope="session")
def tiny_diffusion():
    return Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4, seed=0)


@pytest.fixture(scope="session")
def tiny_ar():
    return Wamdiff2Model.from_preset("tiny", paradigm="ar", seed=1)


@pytest.fixture(scope="session")
def camera_images():
    rng = np.random.RandomState(0)
    return [(rng.rand(96, 160, 3) * 255).astype(np.uint8) for _ in range(4)]


@pytest.fixture(scope="session")
def prompts():
    return [tasks.planning_prompt("left", (10.0, 0.2), (0.5, 0.0)),
            tasks.qa_prompt("Is the left lane free?"),
            tasks.detection_prompt(),
            tasks.planning_prompt("straight", (3.0, 0.0), (-1.0, 0.1))]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small matmuls on two OpenMP threads stall for milliseconds each when the 2-core CI
    machine is busy; one thread keeps each file fast (and changes no result)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
