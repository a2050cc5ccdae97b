"""`process_exit`: a command's process ends without module teardown, and nothing a user
could notice is lost: its code, Python's and C's buffered output, the exit handlers
(temporary folders removed, atexit callbacks), a thread a normal exit waits for. What it
skips (a module-level object's `__del__`) is shown, and `WAMDIFF2_FULL_EXIT=1` restores it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import atexit, ctypes, sys, tempfile, threading, time
    from pathlib import Path
    from wamdiff2_core.process_exit import run_main

    out = Path(sys.argv[1])

    class Teardown:
        def __del__(self):
            (out / "teardown").write_text("ran")

    KEPT = Teardown()                     # lives until module teardown

    def late_writer():
        time.sleep(0.5)
        (out / "thread").write_text("done")

    def main(mode):
        sys.stdout.write("unflushed python output")          # no newline: still buffered
        ctypes.CDLL(None).printf(b"unflushed C output")      # C stdio, a pipe: buffered
        atexit.register(lambda: (out / "atexit").write_text("ran"))
        main.keep = tempfile.TemporaryDirectory(dir=out)     # removed by its exit handler
        (out / "tmpdir").write_text(main.keep.name)
        if mode == "thread":
            threading.Thread(target=late_writer).start()
        if mode == "exit3":
            sys.exit(3)
        if mode == "message":
            sys.exit("one sentence")
        return 7

    run_main(main, sys.argv[2])
""")


def _run(tmp_path, mode: str, **env):
    full = {k: v for k, v in os.environ.items() if k != "WAMDIFF2_FULL_EXIT"}
    return subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path), mode],
                          capture_output=True, text=True, timeout=60, env={**full, **env})


@pytest.mark.parametrize("mode, code", [("plain", 7), ("exit3", 3), ("thread", 7)])
def test_the_code_the_output_and_the_exit_handlers_survive(tmp_path, mode, code):
    done = _run(tmp_path, mode)
    assert done.returncode == code, done.stderr
    assert "unflushed python output" in done.stdout and "unflushed C output" in done.stdout
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not os.path.exists((tmp_path / "tmpdir").read_text())
    if mode == "thread":               # a non-daemon thread: the usual exit waits for it
        assert (tmp_path / "thread").read_text() == "done"
        assert (tmp_path / "teardown").exists()
    else:                              # module teardown skipped: no __del__ at the end
        assert not (tmp_path / "teardown").exists()


def test_a_message_exits_as_sys_exit_does(tmp_path):
    done = _run(tmp_path, "message")
    assert done.returncode == 1 and done.stderr.strip() == "one sentence", done.stderr


def test_full_exit_on_request_runs_module_teardown(tmp_path):
    done = _run(tmp_path, "plain", WAMDIFF2_FULL_EXIT="1")
    assert done.returncode == 7, done.stderr
    assert (tmp_path / "teardown").read_text() == "ran"
