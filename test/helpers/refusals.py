"""Bad input as a user meets it: a subprocess of the console script, its exit code, its one
sentence on stderr, how long it took and how much memory it peaked at."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

WAMDIFF2 = str(Path(sys.executable).parent / "wamdiff2")

# Runs the command as its only child, so RUSAGE_CHILDREN is the command's own peak RSS.
_MEASURE = """
import json, resource, subprocess, sys, time
tic = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "seconds": time.perf_counter() - tic,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


@dataclass(frozen=True)
class Outcome:
    rc: int
    stdout: str
    stderr: str
    seconds: float            # wall time of the command
    peak_mb: float            # its peak resident memory


def run_measured(argv: list[str], timeout: float = 300, **kwargs) -> Outcome:
    """Run ``argv`` (``wamdiff2 ...`` when argv[0] is a subcommand) and measure it."""
    if not Path(argv[0]).is_absolute():
        argv = [WAMDIFF2, *argv]
    done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True,
                          text=True, timeout=timeout, check=True, **kwargs)
    return Outcome(**json.loads(done.stdout))


def assert_one_sentence(rc: int, err: str, *phrases: str, code: int = 2) -> str:
    """The refusal: exit ``code``, no traceback, one line on stderr (notes and warnings
    aside) holding every phrase; returns that line."""
    assert rc == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.strip().splitlines()
             if not line.startswith(("warning:", "note:"))]
    assert len(lines) == 1, err[-3000:]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def without_loading_bar(stderr: str) -> str:
    """``stderr`` without transformers' weight-loading progress bar (the lines a command
    that loads a model writes before its sentence)."""
    return "\n".join(line for line in stderr.replace("\r", "\n").splitlines()
                     if line.strip() and not line.startswith("Loading weights"))

