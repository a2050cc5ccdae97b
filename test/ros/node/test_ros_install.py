"""`ros2 run` / `ros2 launch` find the package after the README's set-up, and the colcon
way builds the same layout (issue 15, item 7). The ament index entry, share files and
lib/wamdiff2_ros/planner_node are what `ros2` looks for on AMENT_PREFIX_PATH."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ros_harness import REPO

BIN = Path(sys.executable).parent
VENV = BIN.parent
INSTALL = REPO / "scripts" / "ament_install.py"


def _env(prefixes: list[Path], **extra: str) -> dict:
    return dict(os.environ, AMENT_PREFIX_PATH=os.pathsep.join(str(p) for p in prefixes),
                PATH=f"{BIN}:{os.environ['PATH']}", **extra)


def test_ament_install_writes_the_index_share_files_and_executable(tmp_path):
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "planner_node").symlink_to(BIN / "planner_node")
    for _ in range(2):                                             # idempotent
        proc = subprocess.run([sys.executable, str(INSTALL), str(prefix)], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
    assert (prefix / "share/ament_index/resource_index/packages/wamdiff2_ros").is_file()
    share = prefix / "share/wamdiff2_ros"
    for name in ("package.xml", "launch/wamdiff2.launch.py", "config/wamdiff2.yaml",
                 "config/fastdds_node.xml"):
        assert (share / name).resolve() == (REPO / name).resolve(), name
    assert not (share / "launch").is_symlink()          # ros2 launch does not follow those
    exe = prefix / "lib/wamdiff2_ros/planner_node"
    assert exe.resolve() == (BIN / "planner_node").resolve()
    bare = tmp_path / "bare"
    proc = subprocess.run([sys.executable, str(INSTALL), str(bare)], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "pip install -e" in proc.stderr


def _ros2_missing() -> str | None:
    return None if (BIN / "ros2").exists() else \
        "the ros2 command line is not installed (bash ../shared/rosenv/build.sh .venv adds it)"


@pytest.mark.ros
@pytest.mark.skipif(_ros2_missing() is not None, reason=str(_ros2_missing()))
def test_ros2_run_finds_the_node_after_the_readme_set_up(ros_domain):
    """scripts/setup.sh ran ament_install.py into .venv: `ros2 run` starts the node (a bad
    parameter makes it exit at once with 2, as docs/ros.md promises, without loading)."""
    env = _env([VENV], ROS_DOMAIN_ID=str(ros_domain))
    out = subprocess.run([str(BIN / "ros2"), "pkg", "executables", "wamdiff2_ros"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "wamdiff2_ros planner_node" in out.stdout, out.stdout + out.stderr
    run = subprocess.run([str(BIN / "ros2"), "run", "wamdiff2_ros", "planner_node",
                          "--ros-args", "-p", "backend:=bogus"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "backend" in run.stderr, run.stdout + run.stderr


def _colcon_missing() -> str | None:
    if _ros2_missing():
        return _ros2_missing()
    return None if (BIN / "colcon").exists() else \
        "colcon is not installed (pip install colcon-common-extensions: the test extra has it)"


@pytest.mark.ros
@pytest.mark.skipif(_colcon_missing() is not None, reason=str(_colcon_missing()))
def test_colcon_build_installs_a_package_ros2_runs(tmp_path, ros_domain):
    src = tmp_path / "src"
    shutil.copytree(REPO, src / "wamdiff2", symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "runs", "build", "install", "log", "__pycache__", "*.egg-info",
        ".pytest_cache", ".hypothesis"))
    proc = subprocess.run([str(BIN / "colcon"), "build", "--base-paths", str(src),
                           "--build-base", str(tmp_path / "build"), "--install-base",
                           str(tmp_path / "install"), "--packages-select", "wamdiff2_ros"],
                          cwd=tmp_path, env=_env([VENV]), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pkg = tmp_path / "install" / "wamdiff2_ros"
    assert (pkg / "share/ament_index/resource_index/packages/wamdiff2_ros").is_file()
    for name in ("package.xml", "launch/wamdiff2.launch.py", "config/wamdiff2.yaml",
                 "config/fastdds_node.xml"):
        assert (pkg / "share/wamdiff2_ros" / name).is_file(), name
    site = next((pkg / "lib").glob("python3*/site-packages"))
    env = _env([pkg, VENV], ROS_DOMAIN_ID=str(ros_domain), PYTHONPATH=str(site))
    run = subprocess.run([str(BIN / "ros2"), "run", "wamdiff2_ros", "planner_node",
                          "--ros-args", "-p", "backend:=bogus"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "backend" in run.stderr, run.stdout + run.stderr
    where = subprocess.run([str(BIN / "ros2"), "pkg", "prefix", "wamdiff2_ros"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.strip() == str(pkg)
