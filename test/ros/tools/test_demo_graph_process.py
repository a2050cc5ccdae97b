"""`demo_graph.NodeProcess`, the node-as-a-process helper of the demo, the bag tools and the
bag tests: its exit code and log are what a failing test reports."""
from __future__ import annotations

from pathlib import Path

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


def test_the_node_gets_the_packages_dds_profile_as_the_launch_file_gives_it(monkeypatch):
    """Unless the environment names a Fast DDS profile (empty: Fast DDS's defaults), a node
    these tools start runs under config/fastdds_node.xml, as under the launch file."""
    from wamdiff2_ros.tools.demo_graph import (DDS_PROFILE_VARIABLE, describe_dds_profile,
                                               dds_profile_env)

    env = dds_profile_env({})
    profile = Path(env[DDS_PROFILE_VARIABLE])
    assert profile.name == "fastdds_node.xml" and profile.is_file()
    assert "<useBuiltinTransports>false</useBuiltinTransports>" in profile.read_text()
    assert dds_profile_env({DDS_PROFILE_VARIABLE: "/etc/mine.xml"}) == {}
    assert dds_profile_env({DDS_PROFILE_VARIABLE: ""}) == {}
    assert dds_profile_env({"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"}) == {}
    assert describe_dds_profile({"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"}) == \
        "Fast DDS profile /etc/mine.xml"
    assert describe_dds_profile({}) == f"Fast DDS profile {profile}"
    assert describe_dds_profile({DDS_PROFILE_VARIABLE: ""}) == "Fast DDS defaults"
    assert describe_dds_profile({DDS_PROFILE_VARIABLE: "/etc/mine.xml"}) == \
        "Fast DDS profile /etc/mine.xml"
    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    monkeypatch.delenv("FASTDDS_DEFAULT_PROFILES_FILE", raising=False)
    assert dds_profile_env() == env                                # this process's env


def test_a_node_process_runs_under_that_profile(ros_domain, tmp_path, monkeypatch):
    from wamdiff2_ros.tools.demo_graph import DDS_PROFILE_VARIABLE

    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    monkeypatch.delenv("FASTDDS_DEFAULT_PROFILES_FILE", raising=False)
    node = NodeProcess(ros_domain, tmp_path / "node.log", {"max_planning_rate_hz": -1.0})
    node.proc.wait(120)
    node.stop()
    assert node.env[DDS_PROFILE_VARIABLE].endswith("fastdds_node.xml")
    monkeypatch.setenv(DDS_PROFILE_VARIABLE, "")
    node = NodeProcess(ros_domain, tmp_path / "node2.log", {"max_planning_rate_hz": -1.0})
    node.proc.wait(120)
    node.stop()
    assert node.env[DDS_PROFILE_VARIABLE] == ""
