"""Camera rigs: named cameras from a rig file or standard names, rendered on one scene, each
with its own pose; `data generate --cameras` writes one image per camera into every record
(the reference format), detection boxes of the first camera only."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wamdiff2_core import tasks
from wamdiff2_core.sim.camera import (CameraConfig, CameraRig, box_points, camera_pose,
                                      load_rig, projected_box)
from wamdiff2_core.sim.detection import boxes_from_ids
from wamdiff2_core.sim.episode import EpisodeConfig
from wamdiff2_core.sim.generator import GeneratorConfig, generate
from wamdiff2_core.sim.renderer import CameraRenderer
from wamdiff2_core.sim.world import World

TOL = 1.5   # pixels, as test_sim_camera.py


def test_standard_names_and_a_rig_file(tmp_path):
    rig = load_rig("front,left", CameraConfig(width=160, height=96, hfov_deg=70.0))
    assert rig.names == ("front", "left")
    assert rig.cameras[1].yaw_deg == 90.0 and rig.cameras[1].width == 160
    assert rig.cameras[0].hfov_deg == 70.0
    path = tmp_path / "rig.yaml"
    path.write_text("cameras:\n  - {name: front}\n"
                    "  - {name: side, yaw_deg: 45, hfov_deg: 100, width: 200, height: 100}\n")
    rig = load_rig(str(path))
    assert rig.names == ("front", "side") and rig.cameras[1].width == 200
    assert rig.to_json()["rig"][1]["mount"]["yaw_deg"] == 45
    assert "rig" not in CameraRig().to_json()                     # one camera: as before


@pytest.mark.parametrize("text, words", [
    ("cameras:\n  - {name: front, zoom: 2}\n", "unknown keys"),
    ("cameras:\n  - {name: front}\n  - {name: front}\n", "twice"),
    ("cameras:\n  - {name: Front}\n", "lower-case identifier"),
    ("cameras:\n  - {name: left, yaw_deg: 400}\n", "yaw_deg"),
    ("cameras: []\n", "non-empty list"),
    ("cameras: [", "not valid YAML"),
])
def test_bad_rig_files_are_refused_with_a_sentence(tmp_path, text, words):
    path = tmp_path / "rig.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=words):
        load_rig(str(path))


def test_unknown_standard_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="front_left"):
        load_rig("front,sky")


def test_a_yawed_camera_looks_to_the_left():
    _, axes = camera_pose(CameraConfig(yaw_deg=90.0, pitch_deg=0.0), np.zeros(2), 0.0)
    assert np.allclose(axes[2], [0.0, 1.0, 0.0])                  # forward = ego's left
    _, axes = camera_pose(CameraConfig(yaw_deg=30.0, pitch_deg=0.0), np.zeros(2), 0.5)
    assert math.atan2(axes[2][1], axes[2][0]) == pytest.approx(0.5 + math.radians(30.0))


@pytest.fixture(scope="module")
def world():
    return World("highway", 0)


def test_rig_frames_follow_each_pose(world):
    """The first camera of a rig renders as it does alone; a camera turned 20 degrees sees
    each vehicle where the numpy projection of its own pose puts it."""
    front = CameraConfig()
    turned = CameraConfig(name="front_left", yaw_deg=20.0)
    ego, others = world.ego_state(), world.others(radius=160.0)
    with CameraRenderer(front, world.lanes) as alone:
        single = alone.render(ego, others)
    with CameraRenderer(CameraRig((front, turned)), world.lanes) as renderer:
        frames = renderer.render_rig(ego, others)
        assert np.array_equal(renderer.render(ego, others).rgb, frames[0].rgb)
    assert np.array_equal(frames[0].rgb, single.rgb)
    assert np.array_equal(frames[0].ids, single.ids)
    assert not np.array_equal(frames[0].rgb, frames[1].rgb)
    boxes = boxes_from_ids(frames[1].ids)
    assert boxes
    for box in boxes:
        agent = next(s for s in others if s.id == box.id)
        projected = projected_box(turned, ego.xy, ego.yaw, box_points(
            agent.x, agent.y, agent.yaw, agent.length, agent.width))
        assert projected is not None
        x1, y1, x2, y2 = box.box
        assert x1 >= projected[0] - TOL and y1 >= projected[1] - TOL
        assert x2 <= projected[2] + TOL and y2 <= projected[3] + TOL


def test_generate_with_a_rig_writes_each_camera_into_every_record(tmp_path):
    rig = load_rig("front,left")
    one = GeneratorConfig(episodes=1, seed=4, scenarios=("highway",),
                          episode=EpisodeConfig(frames=3))
    two = GeneratorConfig(episodes=1, seed=4, scenarios=("highway",),
                          episode=EpisodeConfig(frames=3, camera=rig))
    generate(tmp_path / "one", one, progress=False)
    generate(tmp_path / "two", two, progress=False)
    ones = {r["id"]: r for r in json.loads((tmp_path / "one" / "train.json").read_text())}
    twos = {r["id"]: r for r in json.loads((tmp_path / "two" / "train.json").read_text())}
    assert sorted(ones) == sorted(twos) and len(twos) == 9
    for key, record in twos.items():
        prompt, answer = tasks.record_prompt_and_answer(record)
        assert tasks.prompt_cameras(prompt) == ("front", "left")
        assert [p.rsplit("_", 1)[1] for p in record["image"]] == ["front.png", "left.png"]
        assert all((tmp_path / "two" / p).is_file() for p in record["image"])
        # the same frames, answers (detections: the front camera's boxes) and front pixels
        assert answer == tasks.record_prompt_and_answer(ones[key])[1]
        assert (tmp_path / "two" / record["image"][0]).read_bytes() == \
            (tmp_path / "one" / ones[key]["image"][0]).read_bytes()
    camera = json.loads((tmp_path / "two" / "camera.json").read_text())
    assert [c["name"] for c in camera["rig"]] == ["front", "left"]
    assert camera["width"] == rig.first.width


def test_closed_loop_gives_the_planner_every_camera_of_its_rig():
    from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
    from wamdiff2_core.sim.planners import expert_planner

    seen, expert = [], expert_planner()

    def planner(observation, image):
        seen.append([im.shape for im in observation.images])
        assert image is observation.images[0]
        return expert(observation, image)

    rig = load_rig("front,right", CameraConfig(width=96, height=64))
    config = ClosedLoopConfig(episodes=1, seed=3, scenarios=("highway",), duration_s=1.0,
                              camera=rig)
    (result,) = run_closed_loop(planner, config, progress=False)
    assert result.failure is None and len(seen) >= 2
    assert all(shapes == [(64, 96, 3), (64, 96, 3)] for shapes in seen)


def test_a_checkpoint_planner_refuses_a_rig_it_was_not_trained_with():
    from wamdiff2_core.sim.planners import make_planner

    with pytest.raises(ValueError, match="trained with the cameras front but the rig has "
                                         "front, left"):
        make_planner("checkpoint:tiny", cameras=("front", "left"))
    make_planner("checkpoint:tiny", cameras=("front",))
