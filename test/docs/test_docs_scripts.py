"""The scripts the docs point to exist and start: every `scripts/NAME` a Markdown file names is
in scripts/ and every Python script answers --help."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from markdown_doc import REPO

SCRIPTS = REPO / "scripts"
DOCS = [REPO / "README.md", REPO / "wamdiff2_core" / "assets" / "default_model" / "README.md",
        *sorted((REPO / "docs").glob("*.md"))]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_every_script_the_docs_name_exists():
    # history.md records scripts as they were, with the commit that last held them
    named = {(doc.name, name) for doc in DOCS if doc.name != "history.md"
             for name in re.findall(r"scripts/([A-Za-z0-9_]+\.(?:py|sh))", doc.read_text())}
    missing = sorted(f"{doc}: scripts/{name}" for doc, name in named
                     if not (SCRIPTS / name).exists())
    assert not missing, f"docs name scripts that are not there: {missing}"


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_every_python_script_starts(script):
    proc = _run(str(SCRIPTS / script), "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()

