"""Bounds on commands, questions and stamps; throttled logs; QoS matched to the publishers."""
from __future__ import annotations

import pytest
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

from wamdiff2_ros.node import qos
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.limits import check_command, check_not_future, check_question
from wamdiff2_ros.node.logs import ThrottledLog, clip


def test_commands_are_bounded_before_anything_else():
    assert check_command("  Left ", 32, 80) == "left"
    with pytest.raises(BadInput) as info:
        check_command("left" * 25_000, 32, 80)                        # 100 KB
    assert info.value.kind == "command_too_long" and "100000 characters" in str(info.value)
    assert "leftleft" not in str(info.value)                        # never echoed
    with pytest.raises(BadInput) as info:
        check_command("fly" * 10, 32, 12)
    assert info.value.kind == "command_unknown" and len(str(info.value)) < 100


def test_questions_are_bounded_in_characters_then_tokens():
    counted = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text.split())

    assert check_question(" Is it clear? ", 100, 10, count) == "Is it clear?"
    with pytest.raises(BadInput) as info:
        check_question("x" * 100_000, 2000, 256, count)
    assert info.value.kind == "question_too_long" and "max_question_chars" in str(info.value)
    assert len(counted) == 1                                         # never tokenized
    with pytest.raises(BadInput) as info:
        check_question("word " * 300, 2000, 256, count)
    assert info.value.kind == "question_too_long" and "300 tokens" in str(info.value)
    with pytest.raises(BadInput) as info:
        check_question("   ", 2000, 256, count)
    assert info.value.kind == "question_empty"
    assert check_question("word " * 300, 2000, 256, None) == ("word " * 300).strip()


def test_stamps_ahead_of_the_clock_beyond_the_tolerance():
    check_not_future(100.4, 100.0, 0.5, "frame", "future_frames")
    with pytest.raises(BadInput) as info:
        check_not_future(3700.0, 100.0, 0.5, "frame", "future_frames")
    assert info.value.kind == "future_frames" and "3600.00 s ahead" in str(info.value)
    check_not_future(3700.0, 100.0, 0.0, "frame", "future_frames")   # 0: no check


def test_clip_quotes_at_most_the_limit():
    assert clip("left", 80) == "'left'"
    quoted = clip("x" * 100_000, 80)
    assert len(quoted) < 110 and quoted.endswith("(100000 characters)")


class _Lines:
    """A logger that keeps (severity, line)."""

    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def warning(self, text: str) -> None:
        self.lines.append(("WARN", text))

    def error(self, text: str) -> None:
        self.lines.append(("ERROR", text))


def test_throttled_log_writes_one_line_per_kind_per_period():
    period, sink = [60.0], _Lines()
    log = ThrottledLog(sink, lambda: period[0])
    for _ in range(107):                              # issue 15: 107 WARN lines in 20 s
        log.warn("image_encoding", "bad encoding")
    log.error("model_errors", "boom")
    log.at(False, "image_step", "bad step")
    assert sink.lines == [("WARN", "image_encoding: bad encoding"),
                          ("ERROR", "model_errors: boom"), ("WARN", "image_step: bad step")]
    period[0] = 0.0                                                  # the period has passed
    log.warn("image_encoding", "bad encoding")
    assert sink.lines[-1] == ("WARN", "image_encoding: bad encoding (106 more of this kind "
                                      "not logged)")


def test_the_input_profiles_connect_to_the_publishers_drivers_use():
    """Best effort (the default) connects to reliable and best-effort publishers alike; the
    latched command subscription asks for what a latched publisher keeps."""
    assert qos.input_qos("best_effort", qos.CAMERA_DEPTH).reliability == \
        ReliabilityPolicy.BEST_EFFORT
    assert qos.input_qos("reliable", qos.ODOMETRY_DEPTH).reliability == \
        ReliabilityPolicy.RELIABLE
    assert qos.input_qos("best_effort", qos.CAMERA_DEPTH).depth == 1
    assert qos.COMMAND_ANY_QOS.reliability == ReliabilityPolicy.BEST_EFFORT
    assert qos.COMMAND_LATCHED_QOS.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert qos.QUESTION_QOS.durability == DurabilityPolicy.VOLATILE       # never replayed
    assert qos.describe(qos.COMMAND_LATCHED_QOS) == "reliable, transient local, depth 1"
