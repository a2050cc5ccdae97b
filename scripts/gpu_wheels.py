"""The work of scripts/gpu_wheels.sh: fill .whl/ with the wheels a lent GPU machine lacks (its
image's packages: scripts/gpu_image_packages.txt) for this project's requirements (setup.py's
install_requires, and ``--extra NAME==VERSION`` such as FlashInfer), their own requirements
too, for CPython 3.12 on x86-64, then print what it took and the size of everything that
travels (tracked and untracked files that git does not ignore, plus .whl/), which must stay
under 64 MiB. Exits 1 when it does not, or when a wheel cannot be had.
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 64 * 2 ** 20
PLATFORMS = ["manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
# the device's Python (KINDS.md's pip list: Python 3.12.3)
PIP = ["download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
       "--implementation", "cp"] + [x for p in PLATFORMS for x in ("--platform", p)]


def image_packages(path: Path) -> dict[str, str | None]:
    """name -> version (None: present, version unread) of the device's image."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version or None
    return out


def install_requires(setup_py: Path) -> list[str]:
    """setup.py's install_requires list, read without running setup.py."""
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return [ast.literal_eval(e) for e in node.value.elts]
    raise SystemExit(f"{setup_py} has no install_requires list")


def needed(req: Requirement, image: dict) -> str | None:
    """Why ``req`` must travel, or None when the image satisfies it (or may: see notes)."""
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        return None
    name = canonicalize_name(req.name)
    if name not in image:
        return "missing on the device"
    have = image[name]
    if have is not None and req.specifier and not req.specifier.contains(Version(have),
                                                                         prereleases=True):
        return f"the device has {have}"
    return None


def download(req: Requirement, folder: Path) -> Path:
    """One wheel for ``req`` (pinned, or the newest satisfying version) into ``folder``."""
    cmd = [sys.executable, "-m", "pip", *PIP, "-q", "-d", str(folder), str(req)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    name = canonicalize_name(req.name)
    got = [w for w in folder.glob("*.whl") if canonicalize_name(w.name.split("-")[0]) == name]
    if proc.returncode != 0 or not got:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"no CPython 3.12 x86-64 wheel for {req}: {tail}")
    return got[0]


def wheel_requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    return [Requirement(line.split(":", 1)[1].strip()) for line in lines
            if line.startswith("Requires-Dist:")]


def travelling_bytes() -> int:
    """Tracked and untracked-not-ignored files as git lists them (what a `run` sends)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / p).stat().st_size for p in out.decode().split("\0")
               if p and (ROOT / p).is_file())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--extra", action="append", default=[], metavar="REQ",
                   help="one more requirement to carry, e.g. flashinfer-python==0.6.13")
    p.add_argument("--folder", type=Path, default=ROOT / ".whl")
    a = p.parse_args()
    image = image_packages(ROOT / "scripts" / "gpu_image_packages.txt")
    a.folder.mkdir(exist_ok=True)
    for old in a.folder.glob("*.whl"):       # one version of each: two stop the install
        old.unlink()
    todo = [Requirement(r) for r in install_requires(ROOT / "setup.py") + a.extra]
    taken, done = [], set()
    while todo:
        req = todo.pop(0)
        why = needed(req, image)
        if why is None or canonicalize_name(req.name) in done:
            continue
        done.add(canonicalize_name(req.name))
        wheel = download(req, a.folder)
        taken.append((wheel, str(req), why))
        todo += wheel_requires(wheel)
    for wheel, req, why in taken:
        print(f"{wheel.stat().st_size / 2 ** 20:7.2f} MiB  {wheel.name}  ({req}: {why})")
    wheels = sum(w.stat().st_size for w, _, _ in taken)
    tree = travelling_bytes()
    print(f"{wheels / 2 ** 20:7.2f} MiB  .whl/ ({len(taken)} wheels)")
    print(f"{tree / 2 ** 20:7.2f} MiB  the working tree that travels without .whl/")
    print(f"{(tree + wheels) / 2 ** 20:7.2f} MiB  in all (limit {LIMIT / 2 ** 20:.0f} MiB)")
    unread = sum(v is None for v in image.values())
    print(f"not carried, taken as new enough: {unread} packages the image has at a version "
          "not read here (transformers checks regex, pyyaml and others when it imports)")
    if tree + wheels > LIMIT:
        print("too large to travel: leave out --extra wheels, or carry them in a call of "
              "their own", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
