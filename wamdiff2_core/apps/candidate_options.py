"""The candidate options every planning command shares: ``--candidates K``, ``--scorer``,
``--scorer-weights``, ``--diversity``, ``--candidate-temperature`` (docs/candidates.md).

``--candidates 1`` (the default) is the planner without candidates, answer for answer.
"""
from __future__ import annotations

import argparse

from wamdiff2_core.apps.common import CliError
from wamdiff2_core.candidates.config import (DEFAULT_DIVERSITY, DEFAULT_SCORER,
                                             DEFAULT_TEMPERATURE, DIVERSITY, MAX_K,
                                             SCORER_NAMES, CandidateConfig,
                                             CandidateConfigError)


def add_candidate_options(parser: argparse.ArgumentParser, default_k: int = 1) -> None:
    """The candidate options (``default_k``: the K when --candidates is not given)."""
    group = parser.add_argument_group("candidate plans")
    default = "1: one plan, as without candidates" if default_k == 1 else str(default_k)
    group.add_argument("--candidates", type=int, default=default_k, metavar="K",
                       help=f"decode K candidate plans per frame in one batch and use the "
                            f"one the scorer chooses (1..{MAX_K}; default {default})")
    group.add_argument("--scorer", default=DEFAULT_SCORER, metavar="NAME",
                       help=f"who chooses among the candidates: {' | '.join(SCORER_NAMES)} "
                            f"(default {DEFAULT_SCORER}; learned: the weights the "
                            f"checkpoint ships, or --scorer-weights)")
    group.add_argument("--scorer-weights", default=None, metavar="FILE",
                       help="the learned scorer's weights (`wamdiff2 candidates fit`; "
                            "default: the checkpoint's candidate_scorer.json)")
    group.add_argument("--diversity", default=DEFAULT_DIVERSITY, metavar="HOW",
                       help=f"how the candidates differ from the greedy plan (row 0): "
                            f"{' | '.join(DIVERSITY)} (default {DEFAULT_DIVERSITY})")
    group.add_argument("--candidate-temperature", type=float, default=DEFAULT_TEMPERATURE,
                       metavar="T", help=f"sampling temperature of the sampled candidates "
                                         f"(default {DEFAULT_TEMPERATURE:g})")


def candidate_settings(args: argparse.Namespace) -> dict:
    """``Planner`` keyword arguments of the candidate options (none when the command has
    no such options)."""
    if getattr(args, "candidates", None) is None:
        return {}
    return {"candidates": candidate_config(args), "scorer_weights": args.scorer_weights}


def candidate_config(args: argparse.Namespace) -> CandidateConfig:
    """The ``CandidateConfig`` of the options; one CliError with the reason when out of
    range."""
    try:
        return CandidateConfig(k=args.candidates, scorer=args.scorer,
                               diversity=args.diversity,
                               temperature=args.candidate_temperature)
    except CandidateConfigError as exc:
        raise CliError(str(exc)) from None
