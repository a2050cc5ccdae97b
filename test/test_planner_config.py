"""PlannerConfig: frozen, checked where it is built, the same object from Python, a mapping
(the command line's options) or a YAML file; planners share an engine iff its key is equal."""
import dataclasses
from dataclasses import replace

import pytest

from wamdiff2_core.candidates import CandidateConfig
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, FastConfig
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import Planner
from wamdiff2_core.planner_config import MAPPING_KEYS, PlannerConfig

MAPPING = {"commit_rule": "low_confidence_leftmost", "threshold": 0.95, "steps_per_block": 8,
           "max_new_tokens": 96, "plan_commit_rule": "low_confidence_frontier",
           "backend": "reference", "candidates": 4, "scorer": "rules", "diversity": "commands",
           "candidate_temperature": 1, "scorer_weights": "w.json", "plan_max_speed": 20,
           "lateral_status": True}
WANT = PlannerConfig(
    decode=DecodeConfig(commit_rule="low_confidence_leftmost", threshold=0.95,
                        steps_per_block=8, max_new_tokens=96),
    plan_decode=DecodeConfig(commit_rule="low_confidence_frontier", threshold=0.95,
                             steps_per_block=8, max_new_tokens=96),
    backend="reference",
    candidates=CandidateConfig(k=4, scorer="rules", diversity="commands", temperature=1.0),
    scorer_weights="w.json", plan_max_speed=20.0, lateral_status=True)


def _one_sentence(text: str) -> bool:
    return "\n" not in text and text.count(". ") == 0


def test_it_is_frozen_and_replace_builds_the_next_one():
    config = PlannerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.backend = "reference"
    other = replace(config, backend="reference")
    assert other.backend == "reference" and config.backend is None
    assert config == PlannerConfig() and hash(config) == hash(PlannerConfig())


@pytest.mark.parametrize("kwargs, match", [
    ({"backend": "fastest"}, "unknown decoder backend"),
    ({"plan_max_speed": 0.0}, "plan_max_speed must be"),
    ({"lateral_status": "yes"}, "lateral_status must be"),
    ({"decode": {"threshold": 0.9}}, "decode must be a DecodeConfig"),
    ({"verifier": ""}, "verifier must be"),
    ({"scorer_weights": ""}, "scorer_weights must be"),
    ({"decode": DecodeConfig(mode="exact"), "candidates": CandidateConfig(k=4)},
     "use one or the other"),
])
def test_bad_values_are_one_sentence_errors(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        PlannerConfig(**kwargs)
    assert _one_sentence(str(info.value))


def test_engine_key():
    assert PlannerConfig().engine_key() == ("fast", FastConfig(), None, ExactConfig())
    assert PlannerConfig(backend="fast").engine_key() == PlannerConfig().engine_key()
    assert replace(PlannerConfig(), decode=DecodeConfig(max_new_tokens=9),
                   candidates=CandidateConfig(k=2)).engine_key() == \
        PlannerConfig().engine_key()
    for change in ({"backend": "reference"}, {"fast": FastConfig(fuse_commit=False)},
                   {"verifier": "self"}, {"exact": ExactConfig(draft_steps=2)}):
        assert replace(PlannerConfig(), **change).engine_key() != PlannerConfig().engine_key()


def test_from_mapping():
    assert PlannerConfig.from_mapping({}) == PlannerConfig()
    assert PlannerConfig.from_mapping({"threshold": None, "backend": None}) == PlannerConfig()
    assert PlannerConfig.from_mapping(MAPPING) == WANT
    assert PlannerConfig.from_mapping({"plan_max_speed": 0}).plan_max_speed is None
    exact = PlannerConfig.from_mapping({"decode_mode": "exact", "verifier": "self",
                                        "draft_steps": 2})
    assert (exact.decode.mode, exact.verifier, exact.exact) == \
        ("exact", "self", ExactConfig(draft_steps=2))
    assert set(MAPPING_KEYS) >= set(MAPPING)


@pytest.mark.parametrize("mapping, match", [
    ({"thresold": 0.9}, "unknown key.*thresold"),
    ({"threshold": 2.0}, "threshold must be in"),
    ({"threshold": "high"}, "threshold must be a number"),
    ({"candidates": True}, "candidates must be an integer"),
    ({"candidates": 99}, "candidates must be an integer in 1..16"),
    ({"commit_rule": "fastest"}, "commit_rule must be one of"),
    ({"plan_threshold": 1.5}, "planning answers: threshold"),
    ({"constrained": "no"}, "constrained must be true or false"),
    (["threshold"], "must be a mapping"),
])
def test_from_mapping_refuses_in_one_sentence(mapping, match):
    with pytest.raises(ValueError, match=match) as info:
        PlannerConfig.from_mapping(mapping)
    assert str(info.value).startswith("planner settings: ") and _one_sentence(str(info.value))


def test_from_yaml(tmp_path):
    path = tmp_path / "planner.yaml"
    path.write_text("\n".join(f"{key}: {value}" for key, value in MAPPING.items()) + "\n")
    assert PlannerConfig.from_yaml(path) == WANT
    (tmp_path / "empty.yaml").write_text("")
    assert PlannerConfig.from_yaml(tmp_path / "empty.yaml") == PlannerConfig()
    for text, match in (("thresold: 0.9\n", "unknown key"), ("threshold: 7\n", "threshold"),
                        ("candidates: [1, 2]\n", "candidates must be an integer"),
                        ("a: [\n", "not valid YAML")):
        path.write_text(text)
        with pytest.raises(ValueError, match=match) as info:
            PlannerConfig.from_yaml(path)
        assert str(path) in str(info.value) and _one_sentence(str(info.value))
    with pytest.raises(ValueError, match="does not exist|no such"):
        PlannerConfig.from_yaml(tmp_path / "missing.yaml")


@pytest.fixture(scope="module")
def model():
    return Wamdiff2Model.from_preset("tiny", block_size=4, seed=0)


def test_reconfigure_shares_the_engine_iff_the_key_is_equal(model):
    config = PlannerConfig(DecodeConfig(max_new_tokens=8, constrained=False))
    planner = Planner(model, config)
    assert planner.config is config
    for change in ({"decode": DecodeConfig(max_new_tokens=6, constrained=False)},
                   {"plan_max_speed": None}, {"candidates": CandidateConfig(k=2)},
                   {"lateral_status": True}, {"backend": "fast"}):
        new = planner.reconfigure(replace(config, **change))
        assert new.engine is planner.engine and new.config == replace(config, **change)
    for change in ({"backend": "reference"}, {"fast": FastConfig(fuse_commit=False)},
                   {"verifier": "self"}, {"exact": ExactConfig(draft_steps=2)}):
        new = planner.reconfigure(replace(config, **change))
        assert new.engine is not planner.engine and new.model is planner.model


def test_a_mismatched_engine_is_refused(model):
    planner = Planner(model, PlannerConfig(DecodeConfig(max_new_tokens=8, constrained=False)))
    assert Planner(model, planner.config, engine=planner.engine).engine is planner.engine
    for config in (PlannerConfig(backend="reference"), PlannerConfig(verifier="self"),
                   PlannerConfig(fast=FastConfig(fuse_commit=False))):
        with pytest.raises(ValueError, match="must hold its model"):
            Planner(model, replace(planner.config, **{k: getattr(config, k) for k in
                                                      ("backend", "verifier", "fast")}),
                    engine=planner.engine)
    with pytest.raises(ValueError, match="must hold its model"):
        Planner(Wamdiff2Model.from_preset("tiny", block_size=4, seed=0), planner.config,
                engine=planner.engine)
    with pytest.raises(ValueError, match="takes a PlannerConfig"):
        Planner(model, DecodeConfig())
