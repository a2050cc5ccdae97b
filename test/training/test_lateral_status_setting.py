"""A model trained with the lateral status never shown plans without it (issue 19's
recovery-only stages): the checkpoint says so (config.json's wamdiff2 section,
``lateral_status``) and its planner writes the lateral velocity and acceleration as 0.00,
as the training prompts had them."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import tiny_overrides

from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import Planner, PlannerConfig
from wamdiff2_core.tasks import parse_planning_prompt
from wamdiff2_core.training.config import build_recipe
from wamdiff2_core.training.data import without_lateral_status
from wamdiff2_core.training.engine import train
from wamdiff2_core.types import Observation

OBSERVATION = Observation(images=[], command="left", velocity=(9.5, -1.25),
                          acceleration=(0.5, 0.75))


def _train(data, out, init, dropout):
    recipe = build_recipe({}, tiny_overrides(data, out, init=str(init)) + [
        "train.steps=1", f"data.lateral_status_dropout={dropout}"])
    return train(recipe, log=lambda *a: None)


def test_a_model_trained_without_the_lateral_status_plans_without_it(toy_data, tmp_path):
    blind = _train(toy_data, tmp_path / "blind", "tiny", 1.0)
    section = json.loads((blind / "config.json").read_text())["wamdiff2"]
    assert section["lateral_status"] is False

    planner = Planner.from_pretrained(blind)
    assert planner.lateral_status is False
    prompt = planner.planning_prompt(OBSERVATION)
    state = parse_planning_prompt(prompt)
    assert state["velocity"] == (9.5, 0.0) and state["acceleration"] == (0.5, 0.0)
    # the same text the training loader wrote for it
    shown = Planner(planner.model, PlannerConfig(lateral_status=True)).planning_prompt(
        OBSERVATION)
    assert parse_planning_prompt(shown)["velocity"] == (9.5, -1.25)
    assert without_lateral_status(shown) == prompt
    assert planner.reconfigure(replace(planner.config, plan_max_speed=None)).lateral_status \
        is False
    assert "0.00" in planner.model.describe()

    # trained on with the status shown (even some of the time), it is stated again
    seen = _train(toy_data, tmp_path / "seen", blind, 0.5)
    assert json.loads((seen / "config.json").read_text())["wamdiff2"]["lateral_status"]
    assert Planner.from_pretrained(seen).lateral_status is True


def test_checkpoints_without_the_setting_state_the_status_and_a_bad_value_is_refused(
        toy_data, tmp_path):
    final = _train(toy_data, tmp_path / "plain", "tiny", 0.0)
    path = final / "config.json"
    config = json.loads(path.read_text())
    del config["wamdiff2"]["lateral_status"]           # as every checkpoint before it
    path.write_text(json.dumps(config))
    assert Wamdiff2Model.from_pretrained(final).fields.lateral_status is True
    config["wamdiff2"]["lateral_status"] = "no"
    path.write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="lateral_status must be true or false"):
        Wamdiff2Model.from_pretrained(final)
