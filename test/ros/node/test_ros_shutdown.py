"""Signals at any moment of the node's life end it cleanly: exit code 0, no traceback."""
from __future__ import annotations

import signal
import time

import pytest

from ros_harness import FAST_TINY, NodeProcess, RosClient
from sim_frames import sim_frames

pytestmark = pytest.mark.ros


def _wait_output(node: NodeProcess, text: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in node.output():
        assert node.alive(), node.output()
        assert time.monotonic() < deadline, f"no {text!r} in:\n{node.output()}"
        time.sleep(0.01)


def test_sigint_while_the_model_loads(ros_domain, tmp_path):
    node = NodeProcess(ros_domain, tmp_path, FAST_TINY)
    try:
        _wait_output(node, "loading")
        code = node.sigint(60)
    finally:
        node.stop()
    assert code == 0, node.output()
    assert "Traceback" not in node.output(), node.output()


def test_sigterm_after_planning(ros_domain, tmp_path):
    """(SIGINT while planning under load: test_ros_overload.py.)"""
    node = NodeProcess(ros_domain, tmp_path, FAST_TINY)
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node)
        client.wait_matched(client.image_pub)
        client.wait_answered(client.publish_frame(sim_frames(1, 640, 360)[0].rgb))
        node.proc.send_signal(signal.SIGTERM)
        code = node.proc.wait(60)
    finally:
        client.close()
        node.stop()
    assert code == 0, node.output()
    assert "Traceback" not in node.output(), node.output()
