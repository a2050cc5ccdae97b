"""Every piece of live state has one owner (../shared/STYLE.md, "What that means here"): the
decoding engine owns its device runners and their decoder states, the planner owns its
engine. So, in every module of wamdiff2_core, wamdiff2_ros and scripts/:

- outside wamdiff2_core/decoding/, nothing reads a runner (``.runner``,
  ``.verifier_runner``), the ``.states`` or a ``_private`` attribute of an engine or a runner
  (a receiver whose name says engine or runner), or imports the modules that hold runners and
  states (``decoding.runner``, ``fast``, ``fast_ar``, ``fast_exact``): what callers need the
  engine offers (its properties; ``decoding.step_probes`` for the benchmarks' step timers);
- outside wamdiff2_core/planner.py and decoding/, nothing reads ``.engine`` of another
  object: a class may read its own (``self.engine`` where the class assigns or declares it);
  the other objects called engine that are not decoding engines are listed in
  ``ENGINE_ELSEWHERE`` with the reason.

``getattr``/``setattr``/``hasattr`` with a constant name count as the attribute. Run it alone:
`python -m pytest test/test_ownership.py`."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("wamdiff2_core", "wamdiff2_ros", "scripts")
DECODING = "wamdiff2_core/decoding/"
ENGINE_OWNER = "wamdiff2_core/planner.py"

RUNNER_ATTRIBUTES = {"runner", "verifier_runner"}
#: Read of an engine or a runner only (``states`` is a common word elsewhere).
STATE_ATTRIBUTES = {"states"}
ENGINE_OR_RUNNER = re.compile(r"engine|runner", re.IGNORECASE)
#: The modules of decoding/ that hold runners and decoder states.
DEVICE_MODULES = {f"wamdiff2_core.decoding.{m}" for m in ("runner", "fast", "fast_ar",
                                                           "fast_exact")}

#: (file, the expression read) -> why that ``.engine`` is no decoding engine.
ENGINE_ELSEWHERE = {
    ("wamdiff2_core/sim/renderer.py", "display.engine"):
        "Panda3D's GraphicsEngine of the software display, not a decoding engine",
    ("wamdiff2_core/sim/renderer.py", "self.display.engine"):
        "Panda3D's GraphicsEngine of the software display, not a decoding engine",
}


def _files() -> dict[str, Path]:
    return {str(p.relative_to(ROOT)): p for top in SCANNED
            for p in sorted((ROOT / top).rglob("*.py"))}


def _name(node: ast.AST) -> str:
    """The name an expression reads as: ``engine`` for ``engine``, ``self.engine``,
    ``engines[k]`` and ``DecodingEngine(...)``; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _accesses(tree: ast.Module):
    """(line, receiver, attribute name) of every attribute read or written, ``getattr`` and
    the like with a constant name included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.lineno, node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            yield node.lineno, node.args[0], node.args[1].value


def _own_engines(tree: ast.Module) -> set[int]:
    """Line spans (as a set of lines) of the classes that own an ``engine`` attribute: they
    assign ``self.engine`` or declare an ``engine`` field."""
    lines = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        declared = any(isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                       and n.target.id == "engine" for n in cls.body)
        assigned = any(isinstance(n, ast.Attribute) and n.attr == "engine"
                       and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                       and n.value.id == "self" for n in ast.walk(cls))
        if declared or assigned:
            lines |= set(range(cls.lineno, cls.end_lineno + 1))
    return lines


def _device_imports(tree: ast.Module):
    """(line, module) of every import of a module that holds runners or states."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name in DEVICE_MODULES:
                yield node.lineno, name


def violations(path: str, source: str) -> list[str]:
    """``path:line what`` of each read of state ``path`` (relative to the repository) does
    not own."""
    if path.startswith(DECODING):
        return []
    tree = ast.parse(source)
    own = _own_engines(tree)
    out = [(line, f"imports {module}") for line, module in _device_imports(tree)]
    for line, receiver, attr in _accesses(tree):
        text = f"{ast.unparse(receiver)}.{attr}"
        private = attr.startswith("_") and not attr.startswith("__")
        if attr in RUNNER_ATTRIBUTES:
            out.append((line, f"reads a runner: {text}"))
        elif (attr in STATE_ATTRIBUTES or private) and ENGINE_OR_RUNNER.search(_name(receiver)):
            out.append((line, f"reads inside an engine or runner: {text}"))
        elif attr == "engine" and path != ENGINE_OWNER and (path, text) not in ENGINE_ELSEWHERE:
            mine = isinstance(receiver, ast.Name) and receiver.id == "self" and line in own
            if not mine:
                out.append((line, f"reads another object's engine: {text}"))
    return [f"{path}:{line} {what}" for line, what in sorted(out)]


FOUND = {path: violations(path, file.read_text()) for path, file in _files().items()}


def test_nothing_reads_state_it_does_not_own():
    assert [v for vs in FOUND.values() for v in vs] == []


def test_every_exception_is_still_needed():
    for path, read in ENGINE_ELSEWHERE:
        assert read.endswith(".engine") and read in (ROOT / path).read_text(), (path, read)


@pytest.mark.parametrize("source, what", [
    ("fast = engine.runner.states[key]\n", "reads a runner: engine.runner"),
    ("fast = engine.runner.states[key]\n", "engine.runner.states"),
    ("(st,) = engine.verifier_runner.states.values()\n", "reads a runner"),
    ("r = getattr(engine, 'verifier_runner', None)\n", "reads a runner: engine.verifier_"),
    ("auto = self._engine._automaton(language, 96)\n", "self._engine._automaton"),
    ("st = DecodingEngine(model).states\n", "DecodingEngine(model).states"),
    ("out = planner.engine.decode(batch, cfg)\n", "another object's engine: planner.engine"),
    ("v = self.planner.engine.exact_verifier()\n", "self.planner.engine"),
    ("class Node:\n    def f(self, other):\n        return other.engine\n", "other.engine"),
    ("from wamdiff2_core.decoding.runner import sync\n", "imports wamdiff2_core.decoding.runner"),
    ("from wamdiff2_core.decoding import fast_exact\n", "imports wamdiff2_core.decoding.fast_"),
    ("import wamdiff2_core.decoding.fast_ar as ar\n", "imports wamdiff2_core.decoding.fast_ar"),
    ("buffer = display.engine.make_output()\n", "display.engine"),   # allowed in the renderer only
])
def test_a_planted_read_is_caught(source, what):
    found = violations("wamdiff2_core/apps/somewhere.py", source)
    assert any(what in v for v in found), found


@pytest.mark.parametrize("path, source", [
    ("wamdiff2_core/apps/somewhere.py",
     "class Spec:\n    engine: object\n    def decode(self, b):\n        return self.engine.decode(b)\n"),
    ("wamdiff2_core/apps/somewhere.py",
     "class Job:\n    def __init__(self, e):\n        self.engine = e\n"
     "    def run(self):\n        return self.engine.mode\n"),
    ("wamdiff2_core/apps/somewhere.py",
     "mode, dev = engine.mode, engine.device\nengine.sync()\nself.env._spawn_vehicle()\n"
     "auto.states\nfrom wamdiff2_core.decoding.engine import DecodingEngine\n"),
    ("wamdiff2_core/sim/renderer.py", "buffer = display.engine.make_output()\n"),
    ("wamdiff2_core/planner.py", "out = self.engine.decode(b, c)\nn = other.engine.fast\n"),
    ("wamdiff2_core/decoding/step_probes.py", "runner = engine.runner\nrunner.states[k]\n"),
])
def test_what_an_owner_reads_is_not_flagged(path, source):
    assert violations(path, source) == []
