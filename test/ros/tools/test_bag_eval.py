"""`bag eval`: the planner offline on every frame of a bag; output bag, report, overlays."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from bag_fixtures import WAMDIFF2
from nav_msgs.msg import Path as PathMsg
from rclpy.serialization import deserialize_message, serialize_message

from wamdiff2_core.apps.cli import main
from wamdiff2_ros.tools.bag_io import BagReader, BagWriter
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS, OutputTopics
from wamdiff2_ros.tools.bag_record import compressed_msg
from wamdiff2_ros.tools.demo import SAMPLE_BAG

OUT = OutputTopics()


def _eval(argv: list[str], capsys) -> tuple[int, str]:
    code = main(["bag", "eval", *argv, "--no-progress"])
    return code, capsys.readouterr().out


def test_ground_truth_answers_score_perfectly_end_to_end(tmp_path, capsys):
    """The oracle's plans, written and read back, score L2 ~0 and the expert's collisions."""
    out, report_path = tmp_path / "oracle.mcap", tmp_path / "oracle.json"
    code, _ = _eval([str(SAMPLE_BAG), "--checkpoint", "ground-truth", "--out", str(out),
                     "--report", str(report_path), "--no-frames"], capsys)
    assert code == 0
    report = json.loads(report_path.read_text())
    planning = report["open_loop"]["planning"]
    assert planning["num_parsed"] == 18
    assert planning["l2_mean"] < 0.01                  # waypoints written at 2 decimals
    assert planning["collision_rate"] == planning["gt_collision_rate"]
    detection = report["open_loop"]["detection"]
    assert detection["num_images"] == 18 and detection["ap50"] == pytest.approx(1.0)
    assert detection["map"] > 0.8                      # boxes written on a 0-1000 grid
    assert report["frames_dir"] is None and not (tmp_path / "oracle_frames").exists()
    with BagReader(SAMPLE_BAG) as bag:
        truth = {}
        for *_, raw in bag.messages([SIM_TOPICS.gt_path]):
            msg = deserialize_message(raw, PathMsg)
            truth[(msg.header.stamp.sec, msg.header.stamp.nanosec)] = np.array(
                [[p.pose.position.x, p.pose.position.y] for p in msg.poses])
    with BagReader(out) as bag:
        paths = [deserialize_message(raw, PathMsg) for *_, raw in bag.messages([OUT.path])]
    assert len(paths) == 18
    for path in paths:
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        stamp = (path.header.stamp.sec, path.header.stamp.nanosec)
        np.testing.assert_allclose(xy, truth[stamp], atol=0.006)


def test_bag_of_another_tool_with_a_named_compressed_camera(tmp_path, capsys):
    """No simulator names, no odometry, no ground truth: plans, and no metrics."""
    from wamdiff2_ros.tools.bag_layout import TYPES

    rng = np.random.default_rng(0)
    bag = tmp_path / "other.mcap"
    with BagWriter(bag) as writer:
        for i in range(3):
            rgb = rng.integers(0, 255, (90, 160, 3), dtype=np.uint8)
            t = 5 * 10**9 + i * 10**8
            writer.write("/front/jpeg", TYPES["compressed"], t,
                         serialize_message(compressed_msg(rgb, t, 80)))
    out, report_path = tmp_path / "o", tmp_path / "o.json"
    code, _ = _eval([str(bag), "--camera-topic", "/front/jpeg", "--checkpoint", "tiny",
                     "--max-new-tokens", "16", "--steps-per-block", "2", "--tasks",
                     "planning", "--out", str(out), "--report", str(report_path)], capsys)
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["frames"] == 3 and report["frames_with_ground_truth"] == 0
    assert report["open_loop"] is None and report["detection"] is None
    assert report["topics"]["odometry"] is None and report["camera_model"] == "default"
    assert (out / "metadata.yaml").exists()            # a rosbag2 directory, as asked
    assert len(list((tmp_path / "o_frames").iterdir())) == 3


def test_interrupted_eval_leaves_nothing_behind(tmp_path):
    """Ctrl-C in the middle of planning: no output bag, report, frames or staging files."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen([WAMDIFF2, "bag", "eval", str(SAMPLE_BAG), "--checkpoint", "tiny",
                             "--max-new-tokens", "32", "--steps-per-block", "4",
                             "--out", str(out_dir / "e.mcap"), "--report",
                             str(out_dir / "e.json"), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(out_dir.glob(".*partial*")):
        time.sleep(0.2)                          # until it has started writing
    time.sleep(1.0)                              # 36 decodes take several seconds
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert sorted(p.name for p in out_dir.iterdir()) == []
