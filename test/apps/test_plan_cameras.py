"""`wamdiff2 plan --image A B`: one image per camera of a model trained with several; another
number of images is refused with one sentence naming the model's cameras."""
from __future__ import annotations

import json

import numpy as np
from PIL import Image

from wamdiff2_core.apps.cli import main
from wamdiff2_core.model.modeling import Wamdiff2Model


def test_plan_takes_one_image_per_camera(tmp_path, capsys):
    checkpoint = tmp_path / "rig"
    Wamdiff2Model.from_preset("tiny", seed=0).with_fields(
        cameras=("front", "left")).save_pretrained(checkpoint)
    paths = []
    for name, value in (("front", 40), ("left", 200)):
        paths.append(str(tmp_path / f"{name}.png"))
        Image.fromarray(np.full((96, 160, 3), value, np.uint8)).save(paths[-1])
    assert main(["plan", "--checkpoint", str(checkpoint), "--image", paths[0]]) == 2
    assert ("--image: the model reads 2 camera image(s) per request (front, left), got 1"
            in capsys.readouterr().err)
    code = main(["plan", "--checkpoint", str(checkpoint), "--image", *paths, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and len(out["waypoints"]) == 8     # constrained: parses
