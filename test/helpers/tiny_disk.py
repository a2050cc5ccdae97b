"""A full disk on demand: commands run in a private mount namespace where a folder is a
tiny tmpfs (``unshare --mount``, with ``--map-root-user`` when not root), so writes there
fail with ENOSPC exactly as on a full disk, and nothing outside the command sees the mount."""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path


def _unshare() -> list[str]:
    return ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why a tiny disk cannot be made here (None: it can)."""
    if shutil.which("unshare") is None:
        return "needs util-linux unshare"
    probe = subprocess.run(_unshare() + ["sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True)
    if probe.returncode:
        return f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}"
    return None


def run_on_tiny_disk(script: str, folder: str, size: str, timeout: float = 600,
                     env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the bash ``script`` with ``folder`` (which must exist) mounted as a tmpfs of
    ``size`` (``64k``, ``4m``); inside it ``remount SIZE`` grows the disk."""
    prologue = (f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(folder)} || exit 99\n"
                f"remount() {{ mount -o remount,size=$1 {shlex.quote(folder)}; }}\n")
    return subprocess.run(_unshare() + ["bash", "-c", prologue + script], capture_output=True,
                          text=True, timeout=timeout, env=env)


def sh(argv) -> str:
    """A shell command line of ``argv`` (paths allowed)."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def list_files_script(folder: Path, name: str) -> str:
    """Shell printing ``NAME=<every path under folder, sorted, space-separated>``."""
    return (f"echo {name}=$(cd {shlex.quote(str(folder))} && find . -mindepth 1 | sort | "
            f"tr '\\n' ' ')\n")


def results(stdout: str) -> dict[str, str]:
    """The ``NAME=value`` lines a script printed."""
    return dict(re.findall(r"^(\w+)=(.*)$", stdout, flags=re.M))
