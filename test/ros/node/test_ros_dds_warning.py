"""A node started under Fast DDS's defaults says so at start-up (docs/ros.md, "DDS setting":
its odometry came in hundreds of ms late on a busy machine)."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from ros_harness import PARAMS_FILE, planner_node_executable

from wamdiff2_ros.node.qos import dds_defaults_warning, dds_setting


def test_only_fast_dds_without_a_profile_is_warned_about():
    assert "config/fastdds_node.xml" in dds_defaults_warning({})
    assert dds_defaults_warning({"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"})
    assert dds_defaults_warning({"FASTRTPS_DEFAULT_PROFILES_FILE": "/x.xml"}) is None
    assert dds_defaults_warning({"FASTDDS_DEFAULT_PROFILES_FILE": "/x.xml"}) is None
    assert dds_defaults_warning({"FASTRTPS_DEFAULT_PROFILES_FILE": ""}) is None   # chosen
    assert dds_defaults_warning({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}) is None
    assert dds_setting({"FASTRTPS_DEFAULT_PROFILES_FILE": ""}) == \
        "DDS: rmw_fastrtps_cpp, FASTRTPS_DEFAULT_PROFILES_FILE=''"


def _start(domain: int, tmp_path, env: dict):
    log = open(tmp_path / f"node{len(list(tmp_path.iterdir()))}.log", "w+")
    proc = subprocess.Popen([planner_node_executable(), "--ros-args", "--params-file",
                             str(PARAMS_FILE), "-p", "autostart:=false"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, log


def _stop_and_read(proc, log, until: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline and proc.poll() is None:
        log.flush()
        log.seek(0)
        text = log.read()
        if until in text:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    log.seek(0)
    text = log.read()
    log.close()
    return text


def test_the_node_warns_at_start_up_under_fast_dds_defaults(ros_domain, tmp_path):
    base = {k: v for k, v in os.environ.items()
            if k not in ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE")}
    base.update(ROS_DOMAIN_ID=str(ros_domain), PYTHONUNBUFFERED="1",
                RCUTILS_LOGGING_BUFFERED_STREAM="0", RMW_IMPLEMENTATION="rmw_fastrtps_cpp")
    proc, log = _start(ros_domain, tmp_path, base)
    text = _stop_and_read(proc, log, "Fast DDS's defaults")
    assert "running under Fast DDS's defaults" in text, text
    # with the package's profile (the launch file's setting) it says nothing of the kind
    profile = PARAMS_FILE.parent / "fastdds_node.xml"
    proc, log = _start(ros_domain, tmp_path, dict(base, FASTRTPS_DEFAULT_PROFILES_FILE=str(
        profile)))
    text = _stop_and_read(proc, log, "DDS: rmw_fastrtps_cpp")
    assert f"DDS: rmw_fastrtps_cpp, FASTRTPS_DEFAULT_PROFILES_FILE={profile}" in text, text
    assert "Fast DDS's defaults" not in text, text
