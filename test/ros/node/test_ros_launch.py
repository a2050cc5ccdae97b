"""The launch file (launch_ros is not installable here: checked as Python source) and the
topic names it remaps, which must be the ones the node subscribes to."""
from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from wamdiff2_ros.node import params
from wamdiff2_ros.node.topics import ODOMETRY_TOPIC, camera_topics

LAUNCH = Path(__file__).resolve().parents[3] / "launch" / "wamdiff2.launch.py"


def _tree() -> ast.Module:
    return ast.parse(LAUNCH.read_text(), filename=str(LAUNCH))


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]


def _kw(call: ast.Call, key: str):
    return next(k.value for k in call.keywords if k.arg == key)


def test_launch_file_is_a_launch_description_with_the_promised_arguments():
    tree = _tree()
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    arguments = {c.args[0].value for c in _calls(tree, "DeclareLaunchArgument")}
    assert {"params_file", "checkpoint", "namespace", "camera_topic"} <= arguments
    node = _calls(tree, "Node")[0]
    assert _kw(node, "package").id == "PACKAGE" and _kw(node, "executable").value == \
        "planner_node" and _kw(node, "name").value == "wamdiff2_planner"
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               for a in n.names}
    assert {"LaunchDescription", "DeclareLaunchArgument", "Node"} <= imports


def test_remapped_topics_are_the_nodes_inputs():
    remapped = {t.elts[0].value for t in ast.walk(_tree()) if isinstance(t, ast.Tuple)
                and len(t.elts) == 2 and isinstance(t.elts[0], ast.Constant)
                and str(t.elts[0].value).startswith("~/")}
    defaults = params.node_config({p.name: p.default for p in params.PARAMS})
    subscribed = {topic for transport in params.IMAGE_TRANSPORTS
                  for _, topic in camera_topics(replace(defaults, image_transport=transport))}
    assert remapped == subscribed | {ODOMETRY_TOPIC}


def test_several_cameras_get_a_topic_each():
    defaults = params.node_config({p.name: p.default for p in params.PARAMS})
    cfg = replace(defaults, cameras=("front", "left"), image_transport="compressed")
    assert [t for _, t in camera_topics(cfg)] == ["~/input/front/image/compressed",
                                                  "~/input/left/image/compressed"]
