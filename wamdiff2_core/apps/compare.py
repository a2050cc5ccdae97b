"""``wamdiff2 eval compare``: two planners on the same episodes (or records), the paired
difference with its 95% bootstrap interval and a verdict (docs/evaluation.md, "Paired
comparisons").

    wamdiff2 eval compare --a checkpoint:M --b checkpoint:M/ar_teacher --episodes 60
    wamdiff2 eval compare --a checkpoint:M --b checkpoint:M --b-option candidates=8
    wamdiff2 eval compare --a predictions:p1.json --b predictions:p2.json --data data/eval

Each planner is a ``--planner`` spec with its own options (``--a-option KEY=VALUE``,
repeatable; ``--option`` sets one for both): the decoding, exact-mode and candidate
settings that `eval closed-loop` and `eval open-loop` take as flags, named without the
dashes (``OPTION_KEYS``). Closed loop by default; ``--data`` compares open loop, paired by
record (the specs are then ``checkpoint:DIR`` or ``predictions:FILE``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from wamdiff2_core.apps.candidate_options import candidate_config
from wamdiff2_core.apps.common import (CliError, check_model_source, decode_config,
                                       decode_knobs, exact_settings, rig_arg, scenarios_arg,
                                       subgroup)
from wamdiff2_core.apps.compare_store import EpisodeStore
from wamdiff2_core.apps.outputs import check_output
from wamdiff2_core.apps.predict import add_image_root_option
from wamdiff2_core.candidates.config import (DEFAULT_DIVERSITY, DEFAULT_SCORER,
                                             DEFAULT_TEMPERATURE)

DEFAULT_OUT = "runs/eval/compare"
DEFAULT_SEED = 1000
REPORT_FILE = "compare.json"
SUMMARY_FILE = "compare.txt"
PLOT_FILE = "differences.png"


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


#: ``--a-option`` keys: the option's flag without its dashes -> (argparse name, type).
OPTION_KEYS = {
    "candidates": ("candidates", int), "scorer": ("scorer", str),
    "scorer-weights": ("scorer_weights", str), "diversity": ("diversity", str),
    "candidate-temperature": ("candidate_temperature", float),
    "commit-rule": ("commit_rule", str), "threshold": ("threshold", float),
    "steps-per-block": ("steps_per_block", int), "block-size": ("block_size", int),
    "max-new-tokens": ("max_new_tokens", int), "constrained": ("constrained", _flag),
    "decode-mode": ("decode_mode", str), "verifier": ("verifier", str),
    "draft-steps": ("draft_steps", int),
}
_UNSET = {"candidates": 1, "scorer": DEFAULT_SCORER, "scorer_weights": None,
          "diversity": DEFAULT_DIVERSITY, "candidate_temperature": DEFAULT_TEMPERATURE,
          "verifier": None, "draft_steps": None,
          **{name: None for name in ("commit_rule", "threshold", "steps_per_block",
                                     "block_size", "max_new_tokens", "constrained",
                                     "decode_mode")}}


def register(subparsers) -> None:
    parser = subgroup(subparsers, "eval").add_parser(
        "compare", help="two planners on the same episodes (or records): the paired "
                        "difference with its 95%% interval and a verdict",
        description="Drive the same episodes with planners A and B (or, with --data, answer "
                    "the same records) and report the per-episode differences B - A, their "
                    "mean with a 95% bootstrap interval, the PDMS terms' differences and a "
                    "verdict: A better, B better, or no difference resolved (with the "
                    "episodes a difference of the observed size would need). Writes "
                    f"{REPORT_FILE}, {SUMMARY_FILE} and {PLOT_FILE} to --out.")
    for side in ("a", "b"):
        parser.add_argument(f"--{side}", required=True, metavar="SPEC",
                            help=f"planner {side.upper()}: expert | constant-velocity | "
                                 "checkpoint:DIR (with --data: checkpoint:DIR or "
                                 "predictions:FILE)")
        parser.add_argument(f"--{side}-option", action="append", default=[],
                            metavar="KEY=VALUE",
                            help=f"a setting of planner {side.upper()} (repeatable): "
                                 f"{', '.join(OPTION_KEYS)} (as the flags of eval "
                                 "closed-loop / open-loop, e.g. candidates=8, "
                                 "commit-rule=low_confidence_dynamic)")
        parser.add_argument(f"--{side}-name", default=None, metavar="NAME",
                            help=f"what to call {side.upper()} in the verdict (default: "
                                 "its spec and options)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of both planners (repeatable; a planner's own "
                             "option of the same key wins)")
    parser.add_argument("--episodes", type=int, default=30, metavar="N",
                        help="closed loop: episodes 0..N-1 (default 30)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="S",
                        help=f"closed loop: run seed (default {DEFAULT_SEED})")
    parser.add_argument("--scenarios", default="all",
                        help="closed loop: comma-separated scenario families, cycled")
    parser.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                        help="closed loop: episode length (default: each scenario's own)")
    parser.add_argument("--resolution", default="320x180", metavar="WxH",
                        help="closed loop: camera resolution (default 320x180)")
    parser.add_argument("--cameras", metavar="RIG", help="closed loop: the camera rig")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="closed loop: episodes run on N processes, each planning on one "
                             "thread; results do not depend on N (default: the cores)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the episodes (or predictions) an earlier run of the same "
                             "comparison wrote to --out and run the rest; a larger "
                             "--episodes adds episodes")
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="closed loop: where each planner's episodes are kept, one file "
                             "per planner and settings (default: --out); comparisons that "
                             "share a planner and a store share its episodes (--resume)")
    parser.add_argument("--data", default=None,
                        help="compare open loop on this data set (directory or records "
                             "file), paired by record")
    add_image_root_option(parser, "--data")
    parser.add_argument("--tasks", default=None, help="open loop: only these tasks")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="open loop: only the first N records (after --tasks)")
    parser.add_argument("--batch-size", type=int, default=8, metavar="N",
                        help="open loop: decode batch size of checkpoint specs (default 8)")
    parser.add_argument("--device", default="cpu", help="open loop: torch device")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"report directory (default {DEFAULT_OUT})")
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report instead of the text summary")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_compare)


# ------------------------------------------------------------------------------ planners
def side_options(args: argparse.Namespace, side: str) -> dict[str, str]:
    """The KEY=VALUE settings of planner ``side`` (shared ones first, its own over them);
    CliError for a malformed pair or an unknown key."""
    options: dict[str, str] = {}
    for flag, pairs in (("--option", args.option), (f"--{side}-option",
                                                    getattr(args, f"{side}_option"))):
        for pair in pairs:
            key, sep, value = pair.partition("=")
            key = key.strip().lstrip("-")
            if not sep or not value.strip():
                raise CliError(f"{flag} takes KEY=VALUE, got {pair!r}")
            if key not in OPTION_KEYS:
                raise CliError(f"{flag}: unknown setting {key!r}; known: "
                               f"{', '.join(OPTION_KEYS)}")
            options[key] = value.strip()
    return options


def option_namespace(options: dict[str, str]) -> argparse.Namespace:
    """The settings as the namespace eval closed-loop's flags would give (unset: defaults)."""
    values = dict(_UNSET)
    for key, text in options.items():
        name, kind = OPTION_KEYS[key]
        try:
            values[name] = kind(text)
        except ValueError as exc:
            raise CliError(f"setting {key}={text!r}: {exc}") from None
    return argparse.Namespace(**values)


def planner_settings(spec: str, options: dict[str, str]) -> dict:
    """The ``PlannerRecipe`` / ``Planner`` keywords of a spec's options, checked (one
    CliError): ``decode``, ``candidates``, ``scorer_weights``, ``verifier``, ``exact``."""
    ns = option_namespace(options)
    decode = decode_config(ns) if decode_knobs(ns) else None
    candidates = candidate_config(ns)
    exact = exact_settings(ns)
    name, _, path = spec.partition(":")
    if name == "checkpoint" and path:
        check_model_source(path)
    elif options:
        raise CliError(f"settings ({', '.join(options)}) apply to checkpoint planners, not "
                       f"{spec!r}")
    return {"decode": decode, "candidates": candidates if candidates.enabled else None,
            "scorer_weights": ns.scorer_weights, "verifier": exact["verifier"],
            "exact": exact["exact"] if ns.draft_steps is not None else None}


def side_name(args: argparse.Namespace, side: str, options: dict[str, str]) -> str:
    given = getattr(args, f"{side}_name")
    if given:
        return given
    spec = getattr(args, side)
    return " ".join([spec] + [f"{k}={v}" for k, v in sorted(options.items())])


# ------------------------------------------------------------------------------ closed loop
def _config(args: argparse.Namespace):
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig

    if args.episodes < 1:
        raise CliError("--episodes must be at least 1")
    if args.duration is not None and args.duration <= 0:
        raise CliError("--duration must be positive")
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be at least 1, got {args.workers}")
    try:
        return ClosedLoopConfig(episodes=args.episodes, seed=args.seed,
                                scenarios=scenarios_arg(args.scenarios),
                                duration_s=args.duration,
                                camera=rig_arg(args.cameras, args.resolution))
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _candidate_counts(frames: list[dict]) -> dict | None:
    if not frames:
        return None
    return {"frames": len(frames), "not_greedy": sum(f["chosen"] != 0 for f in frames),
            "fallbacks": sum(bool((f["selection"] or {}).get("fallback")) for f in frames)}


def _closed_loop(args: argparse.Namespace, sides: dict) -> tuple[dict, str]:
    from wamdiff2_core.evaluation.comparison import compare_episodes, format_closed
    from wamdiff2_core.sim.episode_pool import (PlannerBuildError, PlannerRecipe,
                                                default_workers, run_episodes)
    from tqdm import tqdm

    config = _config(args)
    recipes = {side: PlannerRecipe(s["spec"], **s["settings"]) for side, s in sides.items()}
    settings = json.loads(json.dumps(asdict(config)))
    settings.pop("episodes")
    stores = {side: EpisodeStore(args.store or args.out,
                                 {"spec": s["spec"], "options": s["options"],
                                  "config": settings}) for side, s in sides.items()}
    if stores["a"].key == stores["b"].key:         # the same planner: drive it once
        stores = {"a": stores["a"]}
    done = {side: store.open(args.resume) for side, store in stores.items()}
    tasks = [(side, i) for i in range(config.episodes) for side in stores
             if i not in done[side]]
    total = len(stores) * config.episodes
    start = time.perf_counter()
    try:
        with tqdm(total=total, initial=total - len(tasks), desc="eval compare",
                  unit="episode", disable=args.no_progress, dynamic_ncols=True) as bar:
            for run in run_episodes(recipes, config, tasks, args.workers or default_workers()):
                item = {"index": run.result.index, "episode": run.result.to_json(),
                        "candidates": _candidate_counts(run.frames)}
                stores[run.key].add(item)
                done[run.key][run.result.index] = item
                bar.update(1)
    except PlannerBuildError as exc:
        raise CliError(str(exc)) from None
    done.setdefault("b", done["a"])
    names = (sides["a"]["name"], sides["b"]["name"])
    kept = {side: {i: item for i, item in done[side].items() if i < config.episodes}
            for side in ("a", "b")}
    report = compare_episodes({i: x["episode"] for i, x in kept["a"].items()},
                              {i: x["episode"] for i, x in kept["b"].items()}, names)
    report["info"] = {"mode": "closed-loop", "config": settings,
                      **{side: {"spec": s["spec"], "options": s["options"],
                                "episodes_file": str(stores.get(side, stores["a"]).path),
                                "candidates": _sum_counts(kept[side])}
                         for side, s in sides.items()},
                      "wall_s": round(time.perf_counter() - start, 2),
                      "episodes_run": len(tasks), "episodes_kept": total - len(tasks)}
    return report, format_closed(report)


def _sum_counts(items: dict) -> dict | None:
    counts = [item["candidates"] for item in items.values() if item.get("candidates")]
    if not counts:
        return None
    return {key: sum(c[key] for c in counts) for key in counts[0]}


def run_compare(args: argparse.Namespace) -> int:
    check_output(args.out, "--out", folder=True)
    sides = {}
    for side in ("a", "b"):
        spec = getattr(args, side)
        options = side_options(args, side)
        sides[side] = {"spec": spec, "options": options, "name": side_name(args, side, options),
                       "settings": planner_settings(spec, options)}
    if args.data is not None:
        from wamdiff2_core.apps.compare_open import open_loop

        report, text = open_loop(args, sides)
    else:
        report, text = _closed_loop(args, sides)
    paths = write(args.out, report, text)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        sys.stdout.write(text)
        print(f"report: {paths[0]} (+ {len(paths) - 1} files)")
    return 0


def write(out: str, report: dict, text: str) -> list[Path]:
    from wamdiff2_core.evaluation.comparison import plot_differences

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / REPORT_FILE, out_dir / SUMMARY_FILE]
    paths[0].write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    paths[1].write_text(text)
    if "per_episode" in report:
        paths.append(out_dir / PLOT_FILE)
        plot_differences(report, paths[-1])
    return paths
