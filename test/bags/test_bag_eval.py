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

from wamdiff2_core.cli import main
from wamdiff2_core.planner import bundled_checkpoint_path
from wamdiff2_ros.bag_io import BagReader, BagWriter
from wamdiff2_ros.bag_layout import SIM_TOPICS, OutputTopics
from wamdiff2_ros.bag_record import compressed_msg
from wamdiff2_ros.demo import SAMPLE_BAG

OUT = OutputTopics()
# The bundled model where this checkout has one; else the untrained preset, kept fast.
MODEL = [] if bundled_checkpoint_path() else ["--checkpoint", "tiny", "--max-new-tokens", "32",
                                              "--steps-per-block", "4"]


def _eval(argv: list[str], capsys) -> tuple[int, str]:
    code = main(["bag", "eval", *argv, "--no-progress"])
    return code, capsys.readouterr().out


def test_eval_of_the_bundled_bag_writes_output_bag_and_report_with_metrics(tmp_path, capsys):
    out, report_path = tmp_path / "eval.mcap", tmp_path / "report.json"
    code, printed = _eval([str(SAMPLE_BAG), *MODEL, "--tasks", "planning", "--out", str(out),
                           "--report", str(report_path)], capsys)
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["frames"] == report["frames_with_ground_truth"] == 18
    planning = report["open_loop"]["planning"]
    assert planning["num_records"] == 18
    assert planning["num_parsed"] + planning["num_parse_failures"] == 18
    assert report["planning"]["parse_failures"] == planning["num_parse_failures"]
    assert report["planning"]["latency_ms"]["count"] == 18
    if planning["num_parsed"]:
        assert planning["l2_avg_3s"] is not None and planning["collision_rate"] is not None
    else:
        assert planning["l2_avg_3s"] is None          # undefined, never a made-up 0
    assert report["detection"] is None                # not asked for
    with BagReader(out) as bag:
        topics = {t: info.count for t, info in bag.topics.items()}
    assert topics[OUT.markers] == topics[OUT.stats] == 18
    assert topics.get(OUT.path, 0) == planning["num_parsed"]
    frames = sorted(p.name for p in Path(report["frames_dir"]).iterdir())
    assert frames == [f"frame_{i:04d}.png" for i in range(18)]
    assert "18 frames" in printed


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
    from wamdiff2_ros.bag_layout import TYPES

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
