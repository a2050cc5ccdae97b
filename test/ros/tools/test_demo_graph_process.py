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
    """Unless the environment has a DDS setting of its own (an empty profile variable: Fast
    DDS's defaults), a node these tools start runs under config/fastdds_node.xml, as under the
    launch file."""
    from wamdiff2_ros.node.dds import FAST_DDS_VARIABLES, PROFILE_VARIABLE
    from wamdiff2_ros.tools.demo_graph import describe_dds_profile, dds_profile_env

    env = dds_profile_env({})
    profile = Path(env[PROFILE_VARIABLE])
    assert profile.name == "fastdds_node.xml" and profile.is_file()
    assert "<useBuiltinTransports>false</useBuiltinTransports>" in profile.read_text()
    for own in ({PROFILE_VARIABLE: "/etc/mine.xml"}, {PROFILE_VARIABLE: ""},
                {"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"},
                {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"}):
        assert dds_profile_env(own) == {}, own
        assert "the environment's own setting" in describe_dds_profile(own)
    assert describe_dds_profile({}) == \
        f"rmw_fastrtps_cpp with the package's profile ({PROFILE_VARIABLE}={profile})"
    for variable in FAST_DDS_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert dds_profile_env() == env                                # this process's env


def test_a_node_process_runs_under_that_profile(ros_domain, tmp_path, monkeypatch):
    from wamdiff2_ros.node.dds import FAST_DDS_VARIABLES
    from wamdiff2_ros.node.dds import PROFILE_VARIABLE as DDS_PROFILE_VARIABLE

    for variable in FAST_DDS_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    node = NodeProcess(ros_domain, tmp_path / "node.log", {"max_planning_rate_hz": -1.0})
    node.proc.wait(120)
    node.stop()
    assert node.env[DDS_PROFILE_VARIABLE].endswith("fastdds_node.xml")
    monkeypatch.setenv(DDS_PROFILE_VARIABLE, "")
    node = NodeProcess(ros_domain, tmp_path / "node2.log", {"max_planning_rate_hz": -1.0})
    node.proc.wait(120)
    node.stop()
    assert node.env[DDS_PROFILE_VARIABLE] == ""
