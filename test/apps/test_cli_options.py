"""Every `wamdiff2` (sub)command offers the options it offered before the entry points moved
into wamdiff2_core/apps and wamdiff2_ros/tools: flags, choices and nargs are compared with
the listing recorded before the move (cli_options.json, next to this file). A deliberate
change of a command's options updates that file in the same commit."""
import argparse
import json
from pathlib import Path

from wamdiff2_core.apps.cli import build_parser

GOLDEN = Path(__file__).with_name("cli_options.json")


def _options(parser: argparse.ArgumentParser, path: list[str], out: dict) -> dict:
    opts, subs = [], None
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs = action
        elif not isinstance(action, argparse._HelpAction):
            opts.append({"flags": list(action.option_strings) or [action.dest],
                         "choices": list(action.choices) if action.choices else None,
                         "nargs": action.nargs})
    out[" ".join(path)] = sorted(opts, key=lambda o: o["flags"])
    for name, sub in sorted((subs.choices if subs else {}).items()):
        _options(sub, path + [name], out)
    return out


def test_every_command_lists_the_recorded_options():
    now = _options(build_parser(), ["wamdiff2"], {})
    golden = json.loads(GOLDEN.read_text())
    assert sorted(now) == sorted(golden), "commands added or removed"
    for command in golden:
        assert now[command] == golden[command], command


def _command(path: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _help_of(parser: argparse.ArgumentParser, flag: str) -> str:
    return next(a.help for a in parser._actions if flag in a.option_strings)


def test_rule_defaults_say_the_checkpoint_recommends_them():
    """Left out, --commit-rule and --threshold take the checkpoint's recorded rule (the
    bundled model records one): the help says so, and names the fallback resolve_decode
    takes."""
    from wamdiff2_core.decoding.config import DEFAULT_COMMIT_RULE, DEFAULT_THRESHOLD

    for path in (["plan"], ["bench", "decode"], ["eval", "open-loop"], ["eval", "closed-loop"]):
        parser = _command(path)
        rule, threshold = _help_of(parser, "--commit-rule"), _help_of(parser, "--threshold")
        assert "the rule the checkpoint records" in rule, (path, rule)
        assert f"else {DEFAULT_COMMIT_RULE})" in rule, (path, rule)
        assert "the checkpoint's with its rule" in threshold, (path, threshold)
        assert f"else {DEFAULT_THRESHOLD})" in threshold, (path, threshold)
