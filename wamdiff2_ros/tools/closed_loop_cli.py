"""`--through-node` for `wamdiff2 eval closed-loop`: the ROS tools' closed-loop driver (thin:
parse -> NodeSourceConfig -> the core's run_closed_loop through ``NodeSource``).

`eval closed-loop` is registered by ``wamdiff2_core.apps.evaluate``; this module adds its
node options to that parser and sets ``closed_loop_driver`` when `--through-node` is given,
so the core never imports ROS and the apps never import the tools.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from wamdiff2_core.apps.common import CliError, decode_config, decode_knobs, subgroup
from wamdiff2_core.apps.evaluate import CLOSED_LOOP_COMMAND, ClosedLoopDriver


def register(subparsers) -> None:
    parser = subgroup(subparsers, CLOSED_LOOP_COMMAND[0]).choices.get(CLOSED_LOOP_COMMAND[1])
    if parser is None:                      # the eval commands are not installed
        return
    node = parser.add_argument_group(
        "through the ROS node", "--through-node: the simulator publishes camera, odometry, "
        "command and /clock over DDS; planner_node (the shipped params file plus the run's "
        "overrides) plans; the ego follows the newest Path it received")
    node.add_argument("--through-node", dest="closed_loop_driver", action="store_const",
                      const=THROUGH_NODE,
                      help="plan with the real planner_node (needs --planner checkpoint:DIR; "
                           "default time mode realtime)")
    node.add_argument("--node-param", action="append", default=[], metavar="NAME:=VALUE",
                      help="a planner_node parameter override, repeatable (e.g. "
                           "plan_decode.commit_rule:=low_confidence_leftmost)")
    node.add_argument("--params-file", default=None, metavar="PATH",
                      help="node parameters (default: the package's config/wamdiff2.yaml)")
    node.add_argument("--domain-id", type=int, default=0, metavar="N",
                      help="ROS_DOMAIN_ID of the run, 1-101 (default: derived from the pid)")
    node.add_argument("--node-start-timeout", type=float, default=300.0, metavar="SECONDS",
                      help="how long the node may take to load, warm up and subscribe "
                           "(default 300)")


def _node_overrides(args: argparse.Namespace) -> dict:
    from wamdiff2_ros.node import params

    name, _, checkpoint = args.planner.partition(":")
    if name != "checkpoint" or not checkpoint:
        raise CliError(f"--through-node plans with a model: use --planner checkpoint:DIR, "
                       f"not {args.planner!r}")
    overrides = {"checkpoint": checkpoint, "tasks": ["planning"]}
    if decode_knobs(args):
        overrides.update(params.decode_values(decode_config(args)))
    for item in args.node_param:
        key, sep, value = item.partition(":=")
        if not sep or not key:
            raise CliError(f"--node-param takes NAME:=VALUE, got {item!r}")
        overrides[key] = value
    return overrides


def drive_through_node(args: argparse.Namespace, config) -> tuple[list, dict]:
    """Run the episodes of ``config`` with planner_node planning; every process started is
    stopped before this returns (also on an error or Ctrl-C)."""
    from wamdiff2_core.model.checkpoint import read_cameras
    from wamdiff2_core.sim.closed_loop import run_closed_loop
    from wamdiff2_core.sim.planners import check_rig
    from wamdiff2_ros.tools.closed_loop_node import NodeSource, NodeSourceConfig

    if getattr(args, "workers", None) not in (None, 1):   # one node, one world at a time
        raise CliError("--workers runs the in-process planner on several processes; "
                       "--through-node drives one node, one episode at a time: leave "
                       "--workers out")
    overrides = _node_overrides(args)
    try:               # the node would refuse it at configure: say so before starting it
        check_rig(read_cameras(overrides["checkpoint"]), config.camera.names,
                  f"checkpoint {overrides['checkpoint']}")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not 0 <= args.domain_id <= 101:
        raise CliError(f"--domain-id must be in 1..101 (0: derived), got {args.domain_id}")
    if args.node_start_timeout <= 0:
        raise CliError("--node-start-timeout must be positive")
    params_file = Path(args.params_file) if args.params_file else None
    if params_file is not None and not params_file.is_file():
        raise CliError(f"--params-file {params_file} is not a file")
    source = NodeSource(NodeSourceConfig(
        {"cameras": list(config.camera.names), **overrides}, params_file, args.domain_id,
        args.node_start_timeout, args.answer_timeout, log_dir=Path(args.out),
        cameras=config.camera.names))
    try:
        results = run_closed_loop(source, config, progress=not args.no_progress)
        return results, {"node": source.describe()}
    finally:
        source.close()


THROUGH_NODE = ClosedLoopDriver("node", "realtime", drive_through_node)
