"""The import structure the code is read by (docs/INTERFACES.md, "Layout"): every import,
top-level or inside a function, runs from a higher layer down to a lower one or stays inside
its own unit; no two files import each other, directly or round a circle; the domain
packages parse no command line. Run it alone: `python -m pytest test/test_layering.py`."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wamdiff2_core", "wamdiff2_ros")

#: Units and their layers: a unit may import units of lower layers only. Units of one layer
#: are independent of each other.
LAYERS = {
    "wamdiff2_core": 0,               # the package root: version only
    "wamdiff2_ros": 0,
    "wamdiff2_core.geometry": 0,      # plane geometry (numpy)
    "wamdiff2_core.tasks": 0,         # prompts, answer formats, parsers, records
    "wamdiff2_core.model": 1,         # Qwen3-VL model, processor, tokenizers, masks, prompts
    "wamdiff2_core.diffusion": 2,     # noise, losses, training layouts
    "wamdiff2_core.decoding": 2,      # decode config, reference and fast decoders, backends
    "wamdiff2_core.types": 3,         # Observation, results, the bundled model's path
    "wamdiff2_core.training": 3,      # recipes, data, objectives, engine, pipeline
    "wamdiff2_core.planner": 4,       # Planner: the public entry
    "wamdiff2_core.evaluation": 5,    # metrics, scorers, predictors, reports
    "wamdiff2_core.sim": 6,           # world, camera, expert, generator, closed loop
    "wamdiff2_ros.node": 7,           # the ROS 2 node (what runs in a vehicle)
    "wamdiff2_core.apps": 8,          # the `wamdiff2` subcommands, the decoding benchmark
    "wamdiff2_ros.tools": 9,          # bags, demo, node benchmark, their subcommands
    "wamdiff2_core.cli": 10,          # `python -m wamdiff2_core.cli` (torchrun)
}
#: Entry-point wings: the only places that may parse a command line.
WINGS = ("wamdiff2_core.apps", "wamdiff2_ros.tools", "wamdiff2_core.cli")


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = path
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported module or package) of every import statement in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:                  # `from pkg import module` imports pkg.module
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if sub in MODULES else base))
    return out


def _unit(module: str) -> str | None:
    """The unit a module belongs to: the longest LAYERS key it lies in."""
    best = None
    for unit in LAYERS:
        if module == unit or module.startswith(unit + "."):
            best = unit if best is None or len(unit) > len(best) else best
    return best


EDGES = {name: [(line, target) for line, target in _imports(name, path)
                if target.split(".")[0] in PACKAGES]
         for name, path in MODULES.items()}


def test_every_module_belongs_to_a_layer():
    assert [m for m in MODULES if _unit(m) is None] == []


def test_imports_run_downward_only():
    upward = []
    for name, edges in EDGES.items():
        src = _unit(name)
        for line, target in edges:
            dst = _unit(target)
            if dst != src and LAYERS[dst] >= LAYERS[src]:
                upward.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target} "
                              f"({src}, layer {LAYERS[src]} -> {dst}, layer {LAYERS[dst]})")
    assert upward == []


def test_no_import_cycles_between_files():
    graph = {name: {t for _, t in edges if t in MODULES and t != name}
             for name, edges in EDGES.items()}
    # Tarjan's strongly connected components: any component of two or more files is a cycle
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(WINGS)))
def test_no_command_line_outside_the_entry_point_wings(module):
    assert "argparse" not in {t for _, t in _imports(module, MODULES[module])}
