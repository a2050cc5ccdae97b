"""The node's DDS setting (issue 46): the package's Fast DDS profile only where the environment
has no DDS setting of its own, so that the launched node joins its peers' graph; the node
says at start-up which setting it runs under (docs/ros.md, "DDS setting")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ros_harness import PARAMS_FILE, launch_missing, planner_node_executable

from wamdiff2_ros.node import dds

PROFILE = PARAMS_FILE.parent / dds.PROFILE_FILE
BIN = Path(sys.executable).parent
DDS_VARIABLES = ("RMW_IMPLEMENTATION", *dds.FAST_DDS_VARIABLES)


def test_the_profile_applies_only_without_a_setting_of_the_environments_own():
    assert dds.node_environment({}, "/p.xml") == {dds.PROFILE_VARIABLE: "/p.xml"}
    assert dds.node_environment({"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"}, "/p.xml")
    for own in ({"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"},
                {"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"},
                {"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"},
                {"FASTRTPS_DEFAULT_PROFILES_FILE": ""},           # chosen: Fast DDS's defaults
                {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}):
        assert dds.node_environment(own, "/p.xml") == {}, own
        assert dds.defaults_warning(own) is None
        assert "the environment's own setting" in dds.describe(own)
    assert "config/fastdds_node.xml" in dds.defaults_warning({})
    assert dds.describe({dds.PROFILE_VARIABLE: str(PROFILE)}) == \
        f"rmw_fastrtps_cpp with the package's profile ({dds.PROFILE_VARIABLE}={PROFILE})"
    assert dds.describe({"FASTRTPS_DEFAULT_PROFILES_FILE": ""}) == \
        "rmw_fastrtps_cpp with the environment's own setting (FASTRTPS_DEFAULT_PROFILES_FILE='')"


def _clean_env(domain: int, **setting: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DDS_VARIABLES}
    env.update(ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1",
               RCUTILS_LOGGING_BUFFERED_STREAM="0", AMENT_PREFIX_PATH=str(BIN.parent),
               PATH=f"{BIN}:{os.environ['PATH']}", **setting)
    return env


def _wait_for_text(log_path: Path, proc, text: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if text in log_path.read_text():
            break
        time.sleep(0.2)
    return log_path.read_text()


def _stop(proc) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def test_the_node_says_which_setting_it_runs_under(ros_domain, tmp_path):
    cmd = [planner_node_executable(), "--ros-args", "--params-file", str(PARAMS_FILE), "-p",
           "autostart:=false"]
    for setting, expect in (({}, "running under Fast DDS's defaults"),
                            ({dds.PROFILE_VARIABLE: str(PROFILE)},
                             "DDS: rmw_fastrtps_cpp with the package's profile"),
                            ({"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"},
                             "DDS: rmw_fastrtps_cpp with the environment's own setting "
                             "(FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA)")):
        log_path = tmp_path / f"node{len(list(tmp_path.iterdir()))}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    env=_clean_env(ros_domain, **setting))
            text = _wait_for_text(log_path, proc, expect)
            assert _stop(proc) == 0, text
        assert expect in text, text


MISSING = launch_missing()


def _node_list(env: dict, tries: int = 3) -> str:
    out = ""
    for _ in range(tries):
        proc = subprocess.run([str(BIN / "ros2"), "node", "list", "--no-daemon", "--spin-time",
                               "3"], env=env, capture_output=True, text=True, timeout=60)
        out = proc.stdout + proc.stderr
        if "/wamdiff2_planner" in out:
            break
    return out


@pytest.mark.ros
@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_the_launched_node_is_discovered_by_peers_of_its_environment(ros_domain, tmp_path):
    """`ros2 launch` under no DDS setting, LARGE_DATA and a profile file of the integrator's:
    a peer on the launch environment's own setting discovers the node (a LARGE_DATA peer
    never discovered it under the package's profile); a peer on defaults discovers it where
    the launch environment is on defaults or a UDP profile (Fast DDS's LARGE_DATA and its
    defaults do not discover each other, a plain rclpy node's or this one's alike)."""
    tree = yaml.safe_load(PARAMS_FILE.read_text())
    tree["/**"]["ros__parameters"]["autostart"] = False        # discovery needs no model
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tree))
    integrators = tmp_path / "integrator.xml"                  # UDP, the OS's buffer sizes
    integrators.write_text(PROFILE.read_text().replace("8388608", "212992"))
    cases = (("none", {}, True), ("LARGE_DATA", {"FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"},
                                  False),
             ("a profile file", {"FASTRTPS_DEFAULT_PROFILES_FILE": str(integrators)}, True))
    for name, setting, default_peer_too in cases:
        env = _clean_env(ros_domain, **setting)
        log_path = tmp_path / f"launch_{len(list(tmp_path.iterdir()))}.log"
        with open(log_path, "w") as log:
            launch = subprocess.Popen(
                [str(BIN / "ros2"), "launch", "wamdiff2_ros", "wamdiff2.launch.py",
                 f"params_file:={params_file}"], env=env, stdout=log,
                stderr=subprocess.STDOUT)
            try:
                text = _wait_for_text(log_path, launch, "DDS: ")
                expect = ("the package's profile" if not setting else
                          "the environment's own setting")
                assert f"DDS: rmw_fastrtps_cpp with {expect}" in text, (name, text)
                own = _node_list(env)
                assert "/wamdiff2_planner" in own, (name, "own setting", own)
                if default_peer_too:
                    defaults = _node_list(_clean_env(ros_domain))
                    assert "/wamdiff2_planner" in defaults, (name, "defaults", defaults)
            finally:
                assert _stop(launch) == 0, log_path.read_text()
