"""Every function in ``wamdiff2_core/decoding/`` reads at once: at most ``MAX_LINES`` lines
from its ``def`` to its last line (docstring and comments included). The reference diffusion
decoder's loop, which mirrors the official one, is the longest allowed shape (issue 51)."""
import ast
from pathlib import Path

DECODING = Path(__file__).resolve().parents[2] / "wamdiff2_core" / "decoding"
MAX_LINES = 75


def long_functions(root: Path = DECODING, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (N lines)`` of every function or method under ``root`` longer than
    ``limit`` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.relative_to(root.parent.parent)}:{node.lineno} "
                               f"{node.name} ({lines} lines)")
    return out


def test_every_decoding_function_is_at_most_75_lines():
    assert long_functions() == []


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(f"def long():\n{body}\n\n\ndef short():\n"
                                              "    return 1\n")
    found = long_functions(tmp_path / "pkg")
    assert len(found) == 1 and "long (76 lines)" in found[0]
    assert long_functions(tmp_path / "pkg", limit=76) == []
