#!/usr/bin/env bash
# Set up wamdiff2 on a fresh machine: a virtual environment in .venv with the CPU torch wheel
# first (a bare `torch` requirement would pull a multi-GB CUDA build), then the package with
# every extra the tests and the demo need. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[all]"
# `ros2 run` / `ros2 launch` find packages through an ament index, which an editable pip
# install does not write: the index entry, share/wamdiff2_ros and lib/wamdiff2_ros/planner_node
.venv/bin/python scripts/ament_install.py .venv >/dev/null
echo "wamdiff2 set up in $(pwd)/.venv (for ros2 run/launch: export AMENT_PREFIX_PATH=$(pwd)/.venv)"
