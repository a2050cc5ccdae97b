"""docs/ros.md's reference tables follow the code: every parameter of
wamdiff2_ros/node/params.py with its type, default, range or values and run-time group, and
every launch argument of launch/wamdiff2.launch.py with its default. A failure prints the row
the code implies, ready to paste."""
from __future__ import annotations

import importlib.util

import pytest

from markdown_doc import REPO, code_name, section, table_rows

ROS_DOC = REPO / "docs" / "ros.md"
LAUNCH_FILE = REPO / "launch" / "wamdiff2.launch.py"
HEADINGS = ("## Purpose", "## Inputs / Outputs", "## Parameters", "## Launch arguments",
            "## Diagnostics", "## Assumptions / known limits")
# ParamSpec.group -> the "change at run time" cell (live parameters: "next <what>")
CHANGE = {"load": "unconfigured only", "io": "unconfigured only", "decode": "re-warm"}


def ros_type(default) -> str:
    """The ROS parameter type a default fixes, as the table names it."""
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "integer"
    if isinstance(default, float):
        return "double"
    if isinstance(default, str):
        return "string"
    return "string[]"


def default_cell(default) -> str:
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, (list, tuple)):
        return "`[" + ", ".join(default) + "]`"
    if isinstance(default, str):
        return f"`{default}`" if default else '`""`'
    return f"`{default!r}`"


def range_cell(spec) -> str | None:
    """The range / values cell the declaration implies; None where it declares neither (the
    cell is then free text, e.g. `device`, whose values a pattern checks)."""
    if spec.int_range is not None:
        return f"{spec.int_range[0]}..{spec.int_range[1]}"
    if spec.float_range is not None:
        return f"{spec.float_range[0]:g}..{spec.float_range[1]:g}"
    if spec.choices is not None:
        return " \\| ".join(choice or '""' for choice in spec.choices)
    return None


def _parameter_rows() -> dict[str, list[str]]:
    rows = table_rows(section(ROS_DOC.read_text(), "## Parameters"))
    return {code_name(row[0]): row for row in rows if code_name(row[0])}


def test_ros_doc_has_the_autoware_sections():
    lines = ROS_DOC.read_text().splitlines()
    assert [h for h in HEADINGS if h not in lines] == []


def test_parameter_table_matches_the_declarations():
    params = pytest.importorskip("wamdiff2_ros.node.params",
                                 reason="needs the ROS 2 wheels (rcl_interfaces)")
    rows = _parameter_rows()
    wrong = []
    for spec in params.PARAMS:
        expected = [f"`{spec.name}`", ros_type(spec.default), default_cell(spec.default),
                    range_cell(spec), CHANGE.get(spec.group)]
        row = rows.get(spec.name)
        got = row[:5] if row else None
        if got is None or any(want is not None and want != have
                              for want, have in zip(expected, got)):
            wrong.append(f"{spec.name}: table has {got}, the code says {expected}")
        elif spec.group == "live" and not got[4].startswith("next "):
            wrong.append(f"{spec.name}: a live parameter's change cell starts with 'next '")
    extra = sorted(set(rows) - {spec.name for spec in params.PARAMS})
    assert not wrong, "docs/ros.md, Parameters:\n" + "\n".join(wrong)
    assert not extra, f"docs/ros.md documents parameters the node does not declare: {extra}"


def test_launch_argument_table_matches_the_launch_file(monkeypatch):
    pytest.importorskip("launch_ros", reason="needs launch_ros (built from the Jazzy sources "
                                             "or a ROS install)")
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument
    from launch.substitutions import EnvironmentVariable
    from launch.utilities import perform_substitutions

    module_spec = importlib.util.spec_from_file_location("wamdiff2_launch", LAUNCH_FILE)
    launch_module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(launch_module)
    # the checkout has the share directory's layout (launch/, config/)
    monkeypatch.setattr(launch_module, "get_package_share_directory", lambda _: str(REPO))
    monkeypatch.delenv("FASTRTPS_DEFAULT_PROFILES_FILE", raising=False)
    arguments = [e for e in launch_module.generate_launch_description().entities
                 if isinstance(e, DeclareLaunchArgument)]
    rows = {code_name(row[0]): row for row in
            table_rows(section(ROS_DOC.read_text(), "## Launch arguments"))}
    wrong = []
    for argument in arguments:
        row = rows.get(argument.name)
        if row is None:
            wrong.append(f"{argument.name}: no row")
            continue
        default = perform_substitutions(LaunchContext(), argument.default_value)
        cell = row[1]
        if default.startswith(str(REPO)):
            relative = default[len(str(REPO)) + 1:]
            ok = f"`{relative}`" in cell
        else:
            ok = cell == (f"`{default}`" if default else '`""`')
        for sub in argument.default_value:
            if isinstance(sub, EnvironmentVariable):
                name = perform_substitutions(LaunchContext(), sub.name)
                ok = ok and f"`${name}`" in cell
        if not ok:
            wrong.append(f"{argument.name}: default cell {cell!r}, the launch file's default "
                         f"is {default!r}")
    extra = sorted(set(rows) - {a.name for a in arguments})
    assert not wrong, "docs/ros.md, Launch arguments:\n" + "\n".join(wrong)
    assert not extra, f"docs/ros.md documents launch arguments that do not exist: {extra}"
