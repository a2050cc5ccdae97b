"""The import structure the code is read by (docs/INTERFACES.md, "Layout"): every import,
top-level or inside a function, and every module named by string to importlib
(``import_module("...")``, ``__import__``, a module-level tuple of names handed to it), runs
from a higher layer down to a lower one or stays inside its own unit; no two files import
each other, directly or round a circle; the domain packages parse no command line; entry
points (setup.py) name real functions of the entry-point wings. Run it alone:
`python -m pytest test/test_layering.py`."""
import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wamdiff2_core", "wamdiff2_ros")

#: Units and their layers: a unit may import units of lower layers only. Units of one layer
#: are independent of each other.
LAYERS = {
    "wamdiff2_core.user_files": -1,   # files users hand the project, read with limits
    "wamdiff2_core": 0,               # the package root: version only
    "wamdiff2_ros": 0,
    "wamdiff2_core.geometry": 0,      # plane geometry (numpy)
    "wamdiff2_core.atomic_files": 0,  # files written whole or not at all
    "wamdiff2_core.process_exit": 0,  # processes that end without module teardown
    "wamdiff2_core.image_files": 0,   # image files decoded whole, with a pixel limit
    "wamdiff2_core.devices": 0,       # torch devices named by users, checked
    "wamdiff2_core.tasks": 0,         # prompts, answer formats, parsers, records
    "wamdiff2_core.model": 1,         # Qwen3-VL model, processor, tokenizers, masks, prompts
    "wamdiff2_core.diffusion": 2,     # noise, losses, training layouts
    "wamdiff2_core.decoding": 2,      # decode config, reference and fast decoders, backends
    "wamdiff2_core.types": 3,         # Observation, results, the bundled model's path
    "wamdiff2_core.training": 3,      # recipes, data, objectives, engine, pipeline
    "wamdiff2_core.candidates": 3,    # candidate plan sets, their features and scorers
    "wamdiff2_core.planner_config": 3.5,  # PlannerConfig: what a Planner is told (below it)
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


#: Modules that hand importlib a name built at run time, and why it is never one of ours.
DYNAMIC_IMPORTS = {
    "wamdiff2_ros.tools.bag_io": "the ROS message package of a type a bag names",
}
_IMPORT_CALLS = ("import_module", "__import__")


def _string_names(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level names bound to a string or a tuple/list of strings: what a call such as
    ``import_module(name)`` inside a loop over them can import."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            strings = [i.value for i in items
                       if isinstance(i, ast.Constant) and isinstance(i.value, str)]
            if strings and len(strings) == len(items):
                out.update({t.id: strings for t in targets if isinstance(t, ast.Name)})
    return out


def _string_imports(tree: ast.Module) -> tuple[list[tuple[int, str]], list[int]]:
    """(line, module) of each module named by string to importlib, and the lines of calls
    whose argument is built at run time (resolved by nothing here)."""
    names, found, dynamic = _string_names(tree), [], []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in _IMPORT_CALLS:
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append((node.lineno, arg.value))
        elif isinstance(arg, ast.Name) and (names.get(arg.id) or
                                            _loop_over_names(tree, arg.id, names)):
            targets = names.get(arg.id) or _loop_over_names(tree, arg.id, names)
            found += [(node.lineno, target) for target in targets]
        else:
            dynamic.append(node.lineno)
    return found, dynamic


def _loop_over_names(tree: ast.Module, variable: str, names: dict[str, list[str]]
                     ) -> list[str]:
    """The strings a `for variable in NAME` loop over a module-level name binds."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                and node.target.id == variable and isinstance(node.iter, ast.Name)
                and node.iter.id in names):
            return names[node.iter.id]
    return []


def _imports(name: str, path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, imported module or package) of every import statement in the file, and of
    every module it names by string to importlib."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text() if source is None else source)
    out = list(_string_imports(tree)[0])
    for node in ast.walk(tree):
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


def _upward(name: str, edges: list[tuple[int, str]]) -> list[str]:
    src, out = _unit(name), []
    for line, target in edges:
        dst = _unit(target)
        if dst != src and LAYERS[dst] >= LAYERS[src]:
            out.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target} "
                       f"({src}, layer {LAYERS[src]} -> {dst}, layer {LAYERS[dst]})")
    return out


def _ours(edges: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(line, target) for line, target in edges if target.split(".")[0] in PACKAGES]


EDGES = {name: _ours(_imports(name, path)) for name, path in MODULES.items()}


def test_every_module_belongs_to_a_layer():
    assert [m for m in MODULES if _unit(m) is None] == []


def test_imports_run_downward_only():
    assert [line for name, edges in EDGES.items() for line in _upward(name, edges)] == []


def test_a_planted_string_import_is_caught():
    """A core module that loads the ROS tools by import string is an upward import, whether
    the string is passed directly or through a module-level tuple."""
    name = "wamdiff2_core.apps.cli"
    for planted in ('import importlib\nimportlib.import_module("wamdiff2_ros.tools.bench_cli")\n',
                    'from importlib import import_module\nMODS = ("wamdiff2_ros.tools.bag_cli",)\n'
                    'for m in MODS:\n    import_module(m)\n',
                    '__import__("wamdiff2_ros.tools.demo")\n'):
        edges = _ours(_imports(name, MODULES[name], source=planted))
        assert _upward(name, edges), planted


def test_every_string_import_is_resolved_or_explained():
    unresolved = {name: _string_imports(ast.parse(path.read_text()))[1]
                  for name, path in MODULES.items()}
    unresolved = {name: lines for name, lines in unresolved.items() if lines}
    assert set(unresolved) == set(DYNAMIC_IMPORTS), unresolved
    resolved = {target for name, path in MODULES.items()
                for _, target in _string_imports(ast.parse(path.read_text()))[0]}
    assert {t for t in resolved if t.split(".")[0] in PACKAGES} <= set(MODULES)


def _entry_points() -> dict[str, list[str]]:
    """Group -> `name = module:function` lines of setup.py's entry_points."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py declares no entry_points")


def test_entry_points_name_functions_of_the_entry_point_wings():
    groups = _entry_points()
    assert groups.get("wamdiff2.subcommands"), "no wamdiff2 subcommands registered"
    for group, lines in groups.items():
        for line in lines:
            match = re.fullmatch(r"\s*([\w.-]+)\s*=\s*([\w.]+):(\w+)\s*", line)
            assert match, f"{group}: {line!r} is not `name = module:function`"
            module, function = match.group(2), match.group(3)
            assert module in MODULES and callable(
                getattr(importlib.import_module(module), function, None)), line
            assert module.startswith(WINGS) or module.endswith(".planner_node"), line


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
