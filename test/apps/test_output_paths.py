"""Every output path is checked before work starts (issue 45): a file where a folder is
needed, a folder where a file is needed, or a place nothing can be written is one sentence
and exit 2 from the real command line, in seconds, with nothing created; `check_output`
itself, case by case."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from refusals import assert_one_sentence, run_measured

from wamdiff2_core.apps.common import CliError
from wamdiff2_core.apps.outputs import check_output

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "bundle_answers"
UNWRITABLE = "/proc/wamdiff2-no-such-place/out"       # no file can be created under /proc


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return path


def _commands(out: str) -> dict[str, list[str]]:
    """Each writing core subcommand with its output folder set to ``out``."""
    return {
        "data generate": ["data", "generate", "--out", out, "--episodes", "1",
                          "--no-progress"],
        "data merge": ["data", "merge", "--out", out, str(DATA), str(DATA)],
        "pipeline": ["pipeline", "--preset", "tiny", "--data", str(DATA), "--out", out],
        "eval open-loop": ["eval", "open-loop", "--checkpoint", "ground-truth", "--data",
                           str(DATA / "records.json"), "--out", out, "--no-progress"],
        "eval closed-loop": ["eval", "closed-loop", "--planner", "expert", "--episodes", "1",
                             "--out", out, "--no-progress"],
    }


@pytest.mark.parametrize("command", sorted(_commands("X")))
def test_a_file_where_a_folder_is_needed(tmp_path, a_file, command):
    argv = _commands(str(a_file))[command]
    flag = "--out"
    got = run_measured(argv)
    assert_one_sentence(got.rc, got.stderr, f"{flag} {a_file} is a file, not a folder")
    assert got.seconds < 20, got.seconds
    below = a_file / "sub"
    got = run_measured(_commands(str(below))[command])
    assert_one_sentence(got.rc, got.stderr, f"{flag} {below} cannot be created: {a_file} is "
                                            f"a file, not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize("command", ["data generate", "pipeline", "eval open-loop"])
def test_a_place_nothing_can_be_written(command):
    got = run_measured(_commands(UNWRITABLE)[command])
    assert_one_sentence(got.rc, got.stderr, f"--out {UNWRITABLE} cannot be written (in /proc)")


def test_check_output_case_by_case(tmp_path, a_file):
    folder = tmp_path / "folder"
    folder.mkdir()
    assert check_output(folder, "--out", folder=True) == folder
    assert check_output(folder / "new" / "deeper", "--out", folder=True)
    assert check_output(a_file, "--report", folder=False) == a_file      # replaced later
    assert check_output(folder / "report.json", "--report", folder=False)
    loop = tmp_path / "loop"
    os.symlink("loop", loop)
    dangling = tmp_path / "dangling"
    os.symlink("nowhere/x", dangling)
    refused = {
        (folder, False): "is a folder, not a file",
        (a_file, True): "is a file, not a folder",
        (a_file / "x.json", False): f"cannot be created: {a_file} is a file, not a folder",
        (loop, True): "cannot be used: it is a symbolic link loop",
        (loop / "x", False): "cannot be used: it is a symbolic link loop",
        (dangling, False): "is a symbolic link to a missing target",
        (Path("/dev/null"), False): "is not a regular file (a device, pipe or socket)",
        (Path(UNWRITABLE), True): "cannot be written (in /proc): no file can be created there",
    }
    for (path, is_folder), phrase in refused.items():
        with pytest.raises(CliError) as info:
            check_output(path, "--out", folder=is_folder)
        assert str(info.value) == f"--out {path} {phrase}", str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "dangling", "folder",
                                                          "loop"]
    assert sorted(p.name for p in folder.iterdir()) == []               # nothing created
