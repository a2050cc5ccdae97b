"""Training on a camera rig: a recipe whose data.cameras names the rig trains through the
pipeline on `data generate --cameras` records (two images each), and the checkpoint records
the cameras and their order; a recipe whose cameras differ from the data's is refused before
any weight is loaded."""
from __future__ import annotations

import json

import pytest

from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.sim.camera import CameraConfig, load_rig
from wamdiff2_core.sim.episode import EpisodeConfig
from wamdiff2_core.sim.generator import GeneratorConfig, generate
from wamdiff2_core.training.config import RecipeError, find_recipe, load_recipe
from wamdiff2_core.training.engine import train
from wamdiff2_core.training.pipeline import run_pipeline

FAST = ["train.precision=fp32", "output.tensorboard=false", "output.progress=false",
        "train.global_batch=2", "train.micro_batch=2", "data.limit=6"]
RIG = ("front", "left")
PLAN = """
final: b4
stages:
  - {name: ar, recipe: stage0_ar.yaml, set: {model.init: "{preset}"}}
  - {name: b4, recipe: block4.yaml, set: {model.init: "{out}/ar/final"}}
"""


@pytest.fixture(scope="module")
def rig_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("rig") / "data"
    camera = CameraConfig(width=160, height=96)
    config = GeneratorConfig(episodes=1, seed=7, scenarios=("highway",),
                             episode=EpisodeConfig(frames=3, camera=load_rig(",".join(RIG),
                                                                             camera)))
    generate(out, config, progress=False)
    return out


def test_a_rig_recipe_trains_through_the_pipeline_and_records_its_cameras(tmp_path, rig_data):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    final = run_pipeline("tiny", rig_data, tmp_path / "out", plan,
                         FAST + ["data.cameras=[front,left]"], steps_scale=0.002,
                         log=lambda *a, **k: None)
    model = Wamdiff2Model.from_pretrained(final)
    assert model.fields.cameras == RIG and model.fields.block_size == 4
    assert json.loads((final / "config.json").read_text())["wamdiff2"]["cameras"] == list(RIG)
    stage0 = Wamdiff2Model.from_pretrained(tmp_path / "out" / "ar" / "final")
    assert stage0.fields.cameras == RIG and stage0.fields.paradigm == "ar"
    assert "cameras front, left" in model.describe()


@pytest.mark.parametrize("cameras, words", [
    ("[front]", "shows the cameras front, left but data.cameras is \\[front\\]"),
    ("[left,front]", "shows the cameras front, left but data.cameras is \\[left, front\\]"),
    ("[front,Left]", "lower-case identifier"),
])
def test_a_recipe_whose_cameras_differ_from_the_data_is_refused(tmp_path, rig_data, cameras,
                                                                words):
    recipe = load_recipe(find_recipe("stage0_ar.yaml"),
                         FAST + [f"data.path={rig_data}", f"output.dir={tmp_path / 'o'}",
                                 "model.init=tiny", "train.steps=1", f"data.cameras={cameras}"])
    with pytest.raises(RecipeError, match=words):
        train(recipe)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*.safetensors"))
