"""Candidate settings: refused out of range with the reason; the rows of a batch."""
import pytest

from wamdiff2_core.candidates import (MAX_K, CandidateConfig, CandidateConfigError, Row,
                                      row_plan)


@pytest.mark.parametrize("kwargs, words", [
    ({"k": 0}, "1..16"), ({"k": MAX_K + 1}, "1..16"), ({"k": 2.0}, "integer"),
    ({"k": True}, "integer"), ({"scorer": "oracle"}, "unknown candidate scorer 'oracle'"),
    ({"diversity": "beam"}, "unknown candidate diversity"),
    ({"temperature": 0.0}, "temperature"), ({"temperature": float("nan")}, "temperature"),
])
def test_out_of_range_settings_are_refused_with_the_reason(kwargs, words):
    with pytest.raises(CandidateConfigError, match=words.replace(".", r"\.")):
        CandidateConfig(**kwargs)


def test_one_candidate_is_todays_plan():
    config = CandidateConfig()
    assert config.k == 1 and not config.enabled
    assert row_plan(config, "left") == (Row("left", 0.0),)


def test_sampled_rows_follow_the_greedy_row():
    rows = row_plan(CandidateConfig(k=4, temperature=0.5), "straight")
    assert rows == (Row("straight", 0.0),) + (Row("straight", 0.5),) * 3


def test_command_rows_take_the_neighbouring_commands_first():
    rows = row_plan(CandidateConfig(k=5, diversity="commands", temperature=0.7), "left")
    assert rows == (Row("left", 0.0), Row("right", 0.0), Row("straight", 0.0),
                    Row("left", 0.7), Row("left", 0.7))
    assert row_plan(CandidateConfig(k=2, diversity="commands"), "right") == (
        Row("right", 0.0), Row("left", 0.0))


def test_an_unknown_command_is_refused():
    with pytest.raises(ValueError, match="unknown command"):
        row_plan(CandidateConfig(k=2), "north")


class _RosTime:
    """A ROS time (builtin_interfaces/Time's fields) without importing ROS."""

    def __init__(self, sec: int, nanosec: int):
        self.sec, self.nanosec = sec, nanosec


def test_a_frame_seed_follows_the_stamp_and_keeps_the_fixed_seed_without_one():
    config = CandidateConfig(k=4, seed=7)
    assert config.frame_seed(None) == 7                       # no stamp: the fixed seed
    first, second = config.frame_seed(12.5), config.frame_seed(13.0)
    assert first == config.frame_seed(12.5) and first != second   # reproducible, per frame
    assert first != CandidateConfig(k=4, seed=8).frame_seed(12.5)  # the seed still counts
    assert config.frame_seed(_RosTime(12, 500_000_000)) == first   # the same instant
    assert config.frame_seed(12.5 + 1e-9) != first                 # a nanosecond apart
    assert all(0 <= s < 2 ** 63 for s in (first, second))      # a torch generator's seed
