"""Bad bags: truncated file, missing camera topic, unknown message type, non-monotonic
stamps. Each gives one clear sentence and exit code 2, and leaves nothing at the output
paths (no half-written bag, report or frames, no staging leftovers)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from bag_fixtures import SMALL
from nav_msgs.msg import Odometry
from rclpy.serialization import serialize_message
from rosbags.rosbag2 import Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from std_msgs.msg import String

from wamdiff2_core.apps.cli import main
from wamdiff2_ros.tools.bag_io import BagWriter
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS, TYPES
from wamdiff2_ros.tools.bag_record import image_msg, record_sim


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def assert_one_clear_error(code: int, err: str, *phrases: str) -> None:
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def eval_argv(bag: Path, out_dir: Path, *extra: str) -> list[str]:
    return ["bag", "eval", str(bag), "--checkpoint", "ground-truth", "--out",
            str(out_dir / "out.mcap"), "--report", str(out_dir / "report.json"),
            "--no-progress", *extra]


def assert_nothing_written(out_dir: Path) -> None:
    assert not out_dir.exists() or sorted(p.name for p in out_dir.iterdir()) == []


def write_bag(path: Path, messages) -> Path:
    """A bag of (topic, type, log ns, rclpy message), written with the project's writer."""
    with BagWriter(path) as writer:
        for topic, msgtype, log_ns, msg in messages:
            writer.write(topic, msgtype, log_ns, serialize_message(msg))
    return path


T0 = 1_700_000_000 * 10**9


def camera_messages(stamps_ns) -> list:
    rgb = np.zeros((36, 64, 3), np.uint8)
    return [(SIM_TOPICS.image, TYPES["image"], T0 + i * 10**8, image_msg(rgb, s))
            for i, s in enumerate(stamps_ns)]


# ------------------------------------------------------------------------------ truncated
@pytest.fixture(scope="module")
def truncated(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("truncated")
    out = {}
    whole = record_sim(root / "whole.mcap", SMALL, progress=False).out
    data = Path(whole).read_bytes()
    out["mcap"] = root / "cut.mcap"
    out["mcap"].write_bytes(data[: len(data) * 2 // 3])
    folder = Path(record_sim(root / "whole_dir", SMALL, "sqlite3", progress=False).out)
    cut = root / "cut_dir"
    shutil.copytree(folder, cut)
    db = next(cut.glob("*.db3"))
    db.rename(cut / "cut_dir.db3")
    raw = (cut / "cut_dir.db3").read_bytes()
    (cut / "cut_dir.db3").write_bytes(raw[: len(raw) // 2])
    meta = (cut / "metadata.yaml").read_text().replace("whole_dir.db3", "cut_dir.db3")
    (cut / "metadata.yaml").write_text(meta)
    out["sqlite3"] = cut
    return out


@pytest.mark.parametrize("fmt", ["mcap", "sqlite3"])
def test_truncated_bag(truncated, tmp_path, capsys, fmt):
    bag = truncated[fmt]
    out_dir = tmp_path / "out"
    code, err = run_cli(eval_argv(bag, out_dir), capsys)
    assert_one_clear_error(code, err, "truncated", str(bag))
    assert_nothing_written(out_dir)
    code, err = run_cli(["bag", "replay", str(bag)], capsys)
    assert_one_clear_error(code, err, "truncated")
    code, err = run_cli(["bag", "info", str(bag)], capsys)
    assert_one_clear_error(code, err, "truncated")


def test_not_a_bag(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    code, err = run_cli(eval_argv(text, tmp_path / "out"), capsys)
    assert_one_clear_error(code, err, "is not a bag")
    code, err = run_cli(eval_argv(tmp_path / "missing.mcap", tmp_path / "out"), capsys)
    assert_one_clear_error(code, err, "does not exist")
    assert_nothing_written(tmp_path / "out")


# ------------------------------------------------------------------------------ camera topic
def test_missing_camera_topic(tmp_path, capsys):
    bag = write_bag(tmp_path / "no_camera.mcap", [
        (SIM_TOPICS.command, TYPES["string"], T0, String(data="left")),
        (SIM_TOPICS.odometry, TYPES["odometry"], T0, Odometry())])
    out_dir = tmp_path / "out"
    code, err = run_cli(eval_argv(bag, out_dir), capsys)
    assert_one_clear_error(code, err, "has no camera topic", "/navigation/command")
    code, err = run_cli(eval_argv(bag, out_dir, "--camera-topic", "/cam/image"), capsys)
    assert_one_clear_error(code, err, "has no topic /cam/image")
    code, err = run_cli(eval_argv(bag, out_dir, "--camera-topic", SIM_TOPICS.command), capsys)
    assert_one_clear_error(code, err, "has message type std_msgs/msg/String")
    code, err = run_cli(["demo", "--bag", str(bag), "--out", str(out_dir)], capsys)
    assert_one_clear_error(code, err, "has no camera topic")
    assert_nothing_written(out_dir)


def test_several_camera_topics_need_a_choice(tmp_path, capsys):
    rgb = np.zeros((36, 64, 3), np.uint8)
    bag = write_bag(tmp_path / "two.mcap", [("/left/image", TYPES["image"], T0,
                                             image_msg(rgb, T0)),
                                            ("/right/image", TYPES["image"], T0,
                                             image_msg(rgb, T0))])
    code, err = run_cli(eval_argv(bag, tmp_path / "out"), capsys)
    assert_one_clear_error(code, err, "several camera topics", "--camera-topic")


# ------------------------------------------------------------------------------ unknown type
def test_unknown_message_type(tmp_path, capsys):
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg("uint8[] payload\nstring note", "acme_msgs/msg/Blob"))
    bag = tmp_path / "acme"
    with Writer(bag, version=9) as writer:
        conn = writer.add_connection("/acme/blob", "acme_msgs/msg/Blob", typestore=store)
        msg = store.types["acme_msgs/msg/Blob"](payload=np.arange(4, dtype=np.uint8),
                                                note="x")
        writer.write(conn, T0, store.serialize_cdr(msg, "acme_msgs/msg/Blob"))
    code, err = run_cli(["bag", "replay", str(bag)], capsys)
    assert_one_clear_error(code, err, "unknown message type acme_msgs/msg/Blob",
                           "/acme/blob")
    out_dir = tmp_path / "out"
    code, err = run_cli(eval_argv(bag, out_dir, "--camera-topic", "/acme/blob"), capsys)
    assert_one_clear_error(code, err, "acme_msgs/msg/Blob", "expected sensor_msgs/msg/Image")
    assert_nothing_written(out_dir)


# ------------------------------------------------------------------------------ stamps
@pytest.mark.parametrize("stamps", [[1.0, 2.0, 1.5], [1.0, 1.0]], ids=["backwards",
                                                                       "repeated"])
def test_non_monotonic_camera_stamps(tmp_path, capsys, stamps):
    bag = write_bag(tmp_path / "stamps.mcap",
                    camera_messages([T0 + int(s * 1e9) for s in stamps]))
    out_dir = tmp_path / "out"
    code, err = run_cli(eval_argv(bag, out_dir), capsys)
    assert_one_clear_error(code, err, "non-monotonic stamps on /camera/front/image_raw")
    assert_nothing_written(out_dir)
    if stamps == [1.0, 2.0, 1.5]:
        code, err = run_cli(["bag", "replay", str(bag)], capsys)
        assert_one_clear_error(code, err, "non-monotonic stamps", "message 2")


def test_existing_outputs_are_never_overwritten(small_bag, tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "report.json").write_text("{}")
    code, err = run_cli(eval_argv(small_bag, out_dir), capsys)
    assert_one_clear_error(code, err, "already exists")
    assert sorted(p.name for p in out_dir.iterdir()) == ["report.json"]
    assert (out_dir / "report.json").read_text() == "{}"


@pytest.mark.parametrize("command", ["eval", "demo"])
def test_zero_threads_is_one_clear_error(command, small_bag, tmp_path, capsys):
    argv = eval_argv(small_bag, tmp_path / "out", "--threads", "0") if command == "eval" else \
        ["demo", "--out", str(tmp_path / "out"), "--threads", "0"]
    assert_one_clear_error(*run_cli(argv, capsys), "--threads must be >= 1, got 0")
    assert_nothing_written(tmp_path / "out")
