"""Camera rigs through the ROS tools: `bag record-sim --cameras` records each camera on its own
topics, `bag eval` gathers a two-camera model's images from them as the node does (or from
topics named with --camera-topics) and refuses a bag without the model's cameras, and the
closed loop drives a two-camera model through the real node."""
from __future__ import annotations

import json

import pytest
from ros_harness import domain_id

from wamdiff2_core.apps.cli import main
from wamdiff2_ros.tools.bag_io import BagReader

pytestmark = pytest.mark.ros
RIG = ("front", "left")
# a constrained tiny plan (96 tokens, 4 steps a block) always parses: the model's own plan
DECODE = ["--max-new-tokens", "96", "--steps-per-block", "4"]


@pytest.fixture(scope="module")
def rig_checkpoint(tmp_path_factory):
    """An untrained tiny model whose checkpoint says it reads the front and left cameras."""
    from wamdiff2_core.model.modeling import Wamdiff2Model

    path = tmp_path_factory.mktemp("rig_model") / "ckpt"
    Wamdiff2Model.from_preset("tiny", seed=0).with_fields(cameras=RIG).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def rig_bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("rig_bag") / "rig.mcap"
    assert main(["bag", "record-sim", "--out", str(out), "--episodes", "1", "--frames", "3",
                 "--resolution", "160x96", "--cameras", ",".join(RIG), "--no-progress"]) == 0
    return out


def test_record_sim_writes_each_camera_on_its_own_topics(rig_bag):
    with BagReader(rig_bag) as bag:
        for name in RIG:
            for suffix, count in (("image_raw", 3), ("image_raw/compressed", 3),
                                  ("camera_info", 3), ("camera_json", 1)):
                assert bag.topics[f"/camera/{name}/{suffix}"].count == count
        assert "/camera/image_raw" not in bag.topics


def test_bag_eval_plans_with_both_cameras(tmp_path, rig_bag, rig_checkpoint, capsys):
    report = tmp_path / "report.json"
    assert main(["bag", "eval", str(rig_bag), "--checkpoint", str(rig_checkpoint), "--out",
                 str(tmp_path / "out.mcap"), "--report", str(report), "--no-frames",
                 "--tasks", "planning", "--no-progress", *DECODE]) == 0
    result = json.loads(report.read_text())
    assert result["cameras"] == list(RIG) and result["frames_camera_gaps"] == 0
    assert result["planning"]["frames"] == 3 and result["planning"]["parsed"] == 3
    assert "cameras front, left" in capsys.readouterr().out
    # the same topics named explicitly give the same answers
    again = tmp_path / "again.json"
    assert main(["bag", "eval", str(rig_bag), "--checkpoint", str(rig_checkpoint), "--out",
                 str(tmp_path / "again.mcap"), "--report", str(again), "--no-frames",
                 "--tasks", "planning", "--no-progress", *DECODE, "--camera-topics",
                 "left:=/camera/left/image_raw,front:=/camera/front/image_raw"]) == 0
    texts = [[f["planning"]["text"] for f in json.loads(r.read_text())["per_frame"]]
             for r in (report, again)]
    assert texts[0] == texts[1]


def test_bag_eval_refuses_a_bag_without_the_models_cameras(tmp_path, rig_checkpoint, capsys):
    one = tmp_path / "one.mcap"
    assert main(["bag", "record-sim", "--out", str(one), "--episodes", "1", "--frames", "2",
                 "--resolution", "160x96", "--no-progress"]) == 0
    code = main(["bag", "eval", str(one), "--checkpoint", str(rig_checkpoint), "--out",
                 str(tmp_path / "out.mcap"), "--report", str(tmp_path / "r.json"),
                 "--no-frames", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "the model reads the cameras front, left" in err and "/camera/left/image_raw" in err
    assert "--camera-topics front:=TOPIC,left:=TOPIC" in err


def test_closed_loop_drives_a_two_camera_model_through_the_node(tmp_path, request,
                                                                rig_checkpoint, capsys):
    out = tmp_path / "cl"
    code = main(["eval", "closed-loop", "--planner", f"checkpoint:{rig_checkpoint}",
                 "--through-node", "--time", "sync", "--cameras", ",".join(RIG),
                 "--resolution", "160x96", "--episodes", "1", "--scenarios", "highway",
                 "--duration", "1.5", "--domain-id", str(domain_id(request.node.nodeid)),
                 "--out", str(out), "--no-progress", "--max-plots", "0",
                 "--node-param", "decode.max_new_tokens:=96",
                 "--node-param", "decode.steps_per_block:=4"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "closed_loop.json").read_text())
    assert report["failed_episodes"] == [] and report["valid_plans"] >= 2
    assert report["node"]["overrides"]["cameras"] == list(RIG)
    # a rig the model was not trained with is refused before the node starts
    code = main(["eval", "closed-loop", "--planner", f"checkpoint:{rig_checkpoint}",
                 "--through-node", "--cameras", "front", "--episodes", "1",
                 "--out", str(tmp_path / "no"), "--no-progress"])
    assert code == 2 and "trained with the cameras front, left but the rig has front" in \
        capsys.readouterr().err
