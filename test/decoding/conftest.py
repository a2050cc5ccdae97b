"""Decoding tests run torch on one thread (the shared tiny models and prompts are in
test/conftest.py)."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small matmuls on two OpenMP threads stall for milliseconds each when the 2-core CI
    machine is busy; one thread keeps each file fast (and changes no result)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
