"""`demo_graph.NodeProcess`, the node-as-a-process helper of the demo, the bag tools and the
bag tests: its exit code and log are what a failing test reports."""
from __future__ import annotations

from wamdiff2_ros.tools.demo_graph import NodeProcess


def test_a_stopped_node_still_has_its_log_tail(ros_domain, tmp_path):
    """A node that exits on a bad parameter: `stop` gives its exit code, and `log_tail`
    still reads the log after `stop` has closed it (a failed `assert node.stop() == 0,
    node.log_tail()` once reported "I/O operation on closed file" instead of the log)."""
    node = NodeProcess(ros_domain, tmp_path / "node.log", {"max_planning_rate_hz": -1.0})
    node.proc.wait(120)
    assert node.stop() == 2
    tail = node.log_tail()
    assert "invalid parameter" in tail and "max_planning_rate_hz" in tail, tail
