"""Reading the project's Markdown docs in tests: sections, table rows and their cells."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def section(text: str, heading: str) -> str:
    """The body of the section whose heading line is ``heading`` (e.g. ``"## Parameters"``),
    up to the next heading of the same or a higher level; AssertionError if it is missing."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    assert heading in lines, f"no section {heading!r}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines))
                if re.match(rf"#{{1,{len(level)}}} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table body row in ``text`` (header and ``|---|`` lines left out),
    each stripped; ``\\|`` inside a cell stays one cell."""
    lines = [line.strip() for line in text.splitlines()]
    rows = []
    for i, line in enumerate(lines):
        is_header = i + 1 < len(lines) and _is_rule(lines[i + 1])
        if line.startswith("|") and not _is_rule(line) and not is_header:
            rows.append(_cells(line))
    return rows


def tables_cells(text: str) -> list[str]:
    """Every cell of every table in ``text``, headers included."""
    lines = [line.strip() for line in text.splitlines()]
    return [cell for line in lines if line.startswith("|") and not _is_rule(line)
            for cell in _cells(line)]


def _is_rule(line: str) -> bool:
    return re.fullmatch(r"\|[\s:|-]+\|", line) is not None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _CELL_SPLIT.split(line)[1:-1]]


def code_name(cell: str) -> str | None:
    """``"`name`"`` -> ``"name"``; None for a cell that is not one code span."""
    match = re.fullmatch(r"`([^`]*)`", cell)
    return match.group(1) if match else None
