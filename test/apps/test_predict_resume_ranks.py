"""A 2-process `predict` killed when one rank has finished its share, resumed with 2 and with 1
process: the batches left are dealt out afresh (no rank sits at the final collectives while
another decodes them all), and every resumed output equals an uninterrupted run's."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bundle_answers import FIXTURE, RECORDS
from predict_inputs import free_port, without_timing
from processes import descendants

from wamdiff2_core.evaluation.predict_run import share

VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
BATCH = 8


def test_share_deals_the_batches_left_round_robin():
    batches = [(0, 1), (2, 3), (4,), (5, 6), (7,)]
    assert share(batches, {}, 0, 2) == [[0, 1], [4], [7]]            # fresh: batch k -> k % 2
    assert share(batches, {}, 1, 2) == [[2, 3], [5, 6]]
    done = {2: {}, 3: {}, 5: {}, 6: {}}                              # rank 1 had finished
    assert share(batches, done, 0, 2) == [[0, 1], [7]]
    assert share(batches, done, 1, 2) == [[4]]
    assert share(batches, {0: {}}, 0, 1) == [[1], [2, 3], [4], [5, 6], [7]]


def write_input(folder: Path) -> Path:
    """Nine planning records (batch 8: one batch of 8 and one of 1) then one detection
    record: rank 0 gets the 8 and the detection, rank 1 the single planning record, so rank
    1 is done long before rank 0."""
    records = json.loads(RECORDS.read_text())
    planning = [r for r in records if r["task"] == "planning"]
    detection = next(r for r in records if r["task"] == "detection")
    chosen = [{**planning[i % len(planning)], "id": f"p{i}"} for i in range(9)] + [detection]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(FIXTURE / "images", folder / "images", dirs_exist_ok=True)
    path = folder / "eval.json"
    path.write_text(json.dumps(chosen))
    return path


def torchrun(procs: int, input_path: Path, output: Path, *extra) -> list[str]:
    return [str(VENV_BIN / "torchrun"), "--nproc-per-node", str(procs), "--master-port",
            str(free_port()), "-m", "wamdiff2_core.cli", "predict", "--input", str(input_path),
            "--output", str(output), "--batch-size", str(BATCH), "--no-progress", "--json",
            *map(str, extra)]


def finish(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """The parts of a 2-process run killed (SIGKILL, workers and torchrun) the moment rank
    1 wrote its only batch, while rank 0 was still on its first."""
    folder = tmp_path_factory.mktemp("ranks")
    path = write_input(folder / "in")
    out = folder / "killed.json"
    parts = folder / "killed.json.parts"
    proc = subprocess.Popen(torchrun(2, path, out), env=ENV, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not list(parts.glob("rank00001-*.json")):
            assert proc.poll() is None, "predict ended before it was killed"
            assert time.monotonic() < deadline, "rank 1 wrote no part in 300 s"
            time.sleep(0.01)
    finally:
        for pid in descendants(proc.pid) + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    assert not out.exists()
    rank0 = list(parts.glob("rank00000-*.json"))
    rank1 = [item for part in parts.glob("rank00001-*.json")
             for item in json.loads(part.read_text())]
    assert rank0 == [] and len(rank1) == 1            # rank 1's whole share, rank 0's none
    return path, parts


@pytest.fixture(scope="module")
def uninterrupted(killed):
    path, parts = killed
    out = parts.parent / "whole.json"
    finish(torchrun(1, path, out))
    return json.loads(out.read_text())


@pytest.mark.parametrize("procs", [2, 1])
def test_a_resume_deals_the_batches_left_to_every_rank(killed, uninterrupted, procs, tmp_path):
    path, parts = killed
    out = tmp_path / "resumed.json"
    shutil.copytree(parts, tmp_path / "resumed.json.parts")          # the same killed state
    summary = finish(torchrun(procs, path, out, "--resume"))
    assert summary["resumed"] == 1 and summary["decoded"] == 9
    # Left: the batch of 8 and the detection record. Dealt afresh, each rank takes one;
    # as first dealt, both were rank 0's and rank 1 would have waited for them.
    assert summary["decoded_per_rank"] == ([8, 1] if procs == 2 else [9])
    resumed = json.loads(out.read_text())
    assert without_timing(resumed) == without_timing(uninterrupted)
    assert not (tmp_path / "resumed.json.parts").exists()
