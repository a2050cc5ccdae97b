"""Fixtures of the evaluation tests."""
import pytest

from eval_data import write_data_dir


@pytest.fixture
def data_dir(tmp_path):
    """A tiny generated-format data set: 2 planning, 2 detection, 2 QA records."""
    return write_data_dir(tmp_path / "data")
