"""A planner's decode settings (`plan_decode` decodes planning answers, `decode` the rest,
both resolved by `resolve_decode`) and its engine (built once per planner, shared only in
plain sight)."""
from dataclasses import replace

import numpy as np
import pytest

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import Observation, Planner, PlannerConfig

SEEN: list[DecodeConfig] = []


class RecordingEngine(DecodingEngine):
    """The fast engine, noting the settings of each call."""

    def decode(self, batch, cfg, language=None):
        SEEN.append(cfg)
        return super().decode(batch, cfg, language)


def test_plan_decode_applies_to_planning_answers_only():
    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0)
    decode = DecodeConfig(max_new_tokens=8, constrained=False,   # (a plan needs 80 tokens)
                          commit_rule="low_confidence_dynamic", threshold=0.9)   # resolved
    plan_decode = replace(decode, commit_rule="low_confidence_leftmost", steps_per_block=2)
    planner = Planner(model, PlannerConfig(decode, plan_decode), engine=RecordingEngine(model))
    image = np.zeros((36, 64, 3), np.uint8)

    SEEN.clear()
    planner.plan_batch([Observation([image])])
    planner.answer([image], "Is the left lane free?")
    with pytest.raises(tasks.AnswerParseError):             # an untrained model's boxes
        planner.detect([image])
    # detection: the same settings with the budget of a long box list (DETECTION_MAX_NEW_TOKENS)
    assert SEEN == [plan_decode, decode, planner.detection_decode]
    assert planner.detection_decode == replace(decode, max_new_tokens=320)

    SEEN.clear()
    planner.warmup(64, 36)                  # a plan, and a question for the other settings
    assert SEEN == [plan_decode, decode]

    kept = planner.reconfigure(replace(planner.config, decode=replace(decode, threshold=0.5)))
    assert kept.plan_decode == plan_decode and kept.decode.threshold == 0.5
    dropped = planner.reconfigure(replace(planner.config, plan_decode=None))
    assert dropped.plan_decode == decode
    SEEN.clear()
    dropped.warmup(64, 36)
    assert SEEN == [decode]



def test_checkpoint_recommends_its_commit_rule(tmp_path):
    """A checkpoint's decode_commit_rule / decode_threshold decode its answers exactly when
    the caller chooses no rule, threshold or step budget (all None); it survives save and
    load."""
    from wamdiff2_core.decoding.config import resolve_decode

    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0).with_fields(
        decode_commit_rule="low_confidence_frontier", decode_threshold=0.95)
    model.save_pretrained(tmp_path / "m")
    model = Wamdiff2Model.from_pretrained(tmp_path / "m")
    assert (model.fields.decode_commit_rule, model.fields.decode_threshold) == \
        ("low_confidence_frontier", 0.95)
    assert "answers decoded with low_confidence_frontier, threshold 0.95" in model.describe()
    decode = DecodeConfig(max_new_tokens=8, constrained=False)
    image = np.zeros((36, 64, 3), np.uint8)

    planner = Planner(model, PlannerConfig(decode), engine=RecordingEngine(model))
    assert (planner.decode.commit_rule, planner.decode.threshold) == \
        ("low_confidence_frontier", 0.95)                   # what it decodes with, said
    assert planner.decode_summary().startswith("low_confidence_frontier at 0.95")
    SEEN.clear()
    planner.plan_batch([Observation([image])])
    planner.answer([image], "Is the left lane free?")
    assert [(c.commit_rule, c.threshold, c.max_new_tokens) for c in SEEN] == \
        [("low_confidence_frontier", 0.95, 8)] * 2          # the rest is decode's
    # a new decode gets it again; a rule, threshold or step budget the caller names wins
    again = planner.reconfigure(PlannerConfig(replace(decode, max_new_tokens=9)))
    assert (again.decode.commit_rule, again.decode.max_new_tokens) == \
        ("low_confidence_frontier", 9)
    chosen = replace(decode, commit_rule="sequential")
    assert Planner(model, PlannerConfig(chosen)).decode == replace(chosen, threshold=0.9)
    assert resolve_decode(replace(decode, threshold=0.8), model.fields).commit_rule == \
        "low_confidence_dynamic"
    assert resolve_decode(replace(decode, steps_per_block=2), model.fields).commit_rule == \
        "low_confidence_dynamic"
    # an AR model and a model without one: the defaults
    assert resolve_decode(decode, model.fields.with_(paradigm="ar")).commit_rule == \
        "low_confidence_dynamic"
    plain = Planner(Wamdiff2Model.from_preset("tiny", block_size=4), PlannerConfig(decode)).decode
    assert (plain.commit_rule, plain.threshold) == ("low_confidence_dynamic", 0.9)


def test_an_explicit_dynamic_rule_at_the_default_threshold_is_honoured():
    """Asking for low_confidence_dynamic at 0.9 by name, on a checkpoint that recommends
    the frontier rule, decodes with low_confidence_dynamic at 0.9 (it used to look like no
    choice at all), in the planner and in the decoders it calls."""
    from wamdiff2_core.decoding.config import resolve_decode

    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0).with_fields(
        decode_commit_rule="low_confidence_frontier", decode_threshold=0.95)
    explicit = DecodeConfig(max_new_tokens=8, constrained=False,
                            commit_rule="low_confidence_dynamic", threshold=0.9)
    assert resolve_decode(explicit, model.fields) == explicit
    assert resolve_decode(resolve_decode(explicit, model.fields), model.fields) == explicit
    planner = Planner(model, PlannerConfig(explicit), engine=RecordingEngine(model))
    assert planner.decode == explicit
    SEEN.clear()
    planner.plan_batch([Observation([np.zeros((36, 64, 3), np.uint8)])])
    assert [(c.commit_rule, c.threshold) for c in SEEN] == [("low_confidence_dynamic", 0.9)]
    # the CLI: a named rule or threshold reaches the config; nothing named stays None
    import argparse

    from wamdiff2_core.apps.common import DECODE_OPTIONS, add_decode_options, decode_config

    parser = argparse.ArgumentParser()
    add_decode_options(parser, tuple(DECODE_OPTIONS))
    assert decode_config(parser.parse_args(["--commit-rule", "low_confidence_dynamic",
                                            "--threshold", "0.9"])) == \
        DecodeConfig(commit_rule="low_confidence_dynamic", threshold=0.9)
    unset = decode_config(parser.parse_args(["--max-new-tokens", "64"]))
    assert (unset.commit_rule, unset.threshold, unset.steps_per_block) == (None, None, None)
    assert resolve_decode(unset, model.fields).commit_rule == "low_confidence_frontier"


def test_a_bad_recommendation_is_refused(tmp_path):
    import json

    from wamdiff2_core.model.checkpoint import CheckpointError

    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0)
    with pytest.raises(CheckpointError, match="'fastest', which is not one of"):
        Planner(model.with_fields(decode_commit_rule="fastest"))
    model.save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["wamdiff2"]["decode_threshold"] = 2.5
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="decode_threshold must be a number in"):
        Wamdiff2Model.from_pretrained(tmp_path / "m")


def test_a_planner_owns_its_engine_and_shares_it_only_in_plain_sight():
    """Each planner builds one engine and reuses it call after call; two planners on one
    model share nothing unless given the same engine; reconfigure shares it when the
    backend and fast settings stay, and builds another when they change."""
    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0)
    decode = DecodeConfig(max_new_tokens=8, constrained=False)
    image = np.zeros((36, 64, 3), np.uint8)
    a, b = Planner(model, PlannerConfig(decode)), Planner(model, PlannerConfig(decode))
    assert a.engine is not b.engine                        # no hidden cache keyed by model
    a.warmup(64, 36)
    built = dict(a.engine.runner.states)
    assert built and not b.engine.runner.states
    a.plan_batch([Observation([image])])
    a.answer([image], "Is the left lane free?")
    assert a.engine.runner.states == built                  # the same state objects, reused
    assert all(a.engine.runner.states[k] is v for k, v in built.items())

    same = a.reconfigure(PlannerConfig(replace(decode, max_new_tokens=6)))
    assert same.engine is a.engine and same.decode.max_new_tokens == 6
    assert a.reconfigure(replace(a.config, plan_max_speed=None)).engine is a.engine
    reference = a.reconfigure(replace(a.config, backend="reference"))
    assert reference.engine is not a.engine and reference.engine.runner is None
    assert reference.backend == "reference" and \
        reference.reconfigure(reference.config).backend == "reference"
    unfused = a.reconfigure(replace(a.config, fast=FastConfig(fuse_commit=False)))
    assert unfused.engine is not a.engine and unfused.engine.fast.fuse_commit is False
    given = Planner(model, PlannerConfig(decode), engine=a.engine)
    assert given.engine is a.engine
    with pytest.raises(ValueError, match="must hold its model"):
        Planner(model.with_fields(block_size=8), PlannerConfig(decode), engine=a.engine)
    with pytest.raises(ValueError, match="must hold its model"):
        Planner(model, PlannerConfig(decode, backend="reference"), engine=a.engine)
    with pytest.raises(ValueError, match="unknown decoder backend"):
        Planner(model, PlannerConfig(decode, backend="fastest"))


def test_the_engine_compiles_each_language_once():
    """The answer languages' automata belong to the engine: compiled on first use, kept."""
    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0)
    planner = Planner(model, PlannerConfig(DecodeConfig(max_new_tokens=96, steps_per_block=4)))
    auto = planner.engine.automata[planner.plan_language]      # the budget check built it
    planner.plan(Observation([np.zeros((36, 64, 3), np.uint8)]))
    assert planner.engine.automata[planner.plan_language] is auto
    assert planner.reconfigure(planner.config).engine.automaton(planner.plan_language, 96) \
        is auto
    assert Planner(model, PlannerConfig(planner.decode)).engine.automaton(planner.plan_language, 96) \
        is not auto                                         # another owner, its own
