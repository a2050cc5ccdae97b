"""`bag replay` checks what it publishes as `bag eval` checks what it reads (issue 45; one
definition, `bag_frames.check_bag`): a String on the camera topic and repeated camera stamps
are refused by both in one sentence with exit 2; camera frames with garbage or short image
data are skipped and counted by replay (what eval counts as unusable), and `--as-is`
publishes the bag unchecked. Real bags, the real `wamdiff2` command, real DDS."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from bag_fixtures import WAMDIFF2
from bag_live import Listener
from rclpy.serialization import serialize_message
from refusals import assert_one_sentence
from std_msgs.msg import String

from wamdiff2_ros.tools.bag_io import BagWriter, header_stamp_ns
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS, TYPES
from wamdiff2_ros.tools.bag_record import image_msg

pytestmark = pytest.mark.ros
T0 = 1_700_000_000 * 10**9
CAMERA = SIM_TOPICS.image


def write_bag(path: Path, frames: list[tuple[int, bytes]], msgtype: str = TYPES["image"]
              ) -> Path:
    """A bag of camera messages (stamp ns, CDR bytes), 0.1 s apart in log time."""
    with BagWriter(path) as writer:
        for i, (_, raw) in enumerate(frames):
            writer.write(CAMERA, msgtype, T0 + i * 10**8, raw)
    return path


def frame(i: int, stamp_ns: int | None = None, short: bool = False,
          encoding: str = "rgb8") -> tuple[int, bytes]:
    stamp = T0 + i * 10**8 if stamp_ns is None else stamp_ns
    msg = image_msg(np.full((36, 64, 3), 10 * i, np.uint8), stamp)
    msg.encoding = encoding
    if short:
        msg.data = msg.data[:100]                        # 100 of 6912 bytes
    return stamp, serialize_message(msg)


def run(*argv: str, domain: int, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    return subprocess.run([WAMDIFF2, *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)


def eval_bag(bag: Path, tmp: Path) -> subprocess.CompletedProcess:
    return run("bag", "eval", str(bag), "--checkpoint", "ground-truth", "--out",
               str(tmp / f"{bag.stem}_out.mcap"), "--report", str(tmp / f"{bag.stem}.json"),
               "--no-frames", "--no-progress", domain=0)


def test_a_string_on_the_camera_topic_is_refused_by_replay_and_eval(tmp_path, ros_domain):
    bag = write_bag(tmp_path / "string.mcap",
                    [(0, serialize_message(String(data="not an image")))] * 3, TYPES["string"])
    phrase = f"topic {CAMERA} in {bag} has message type std_msgs/msg/String"
    got = run("bag", "replay", str(bag), "--quiet", domain=ros_domain)
    assert_one_sentence(got.returncode, got.stderr, phrase)
    got = eval_bag(bag, tmp_path)
    assert_one_sentence(got.returncode, got.stderr, phrase)
    got = run("bag", "replay", str(bag), "--quiet", "--as-is", domain=ros_domain)
    assert got.returncode == 0, got.stderr


def test_repeated_camera_stamps_are_refused_by_replay_and_eval(tmp_path, ros_domain):
    bag = write_bag(tmp_path / "repeated.mcap", [frame(0), frame(1), frame(2, T0 + 10**8)])
    phrase = f"non-monotonic stamps on {CAMERA} in {bag}: message 2"
    got = run("bag", "replay", str(bag), "--quiet", domain=ros_domain)
    assert_one_sentence(got.returncode, got.stderr, phrase, "not after message 1")
    got = eval_bag(bag, tmp_path)
    assert_one_sentence(got.returncode, got.stderr, phrase)


def test_unusable_frames_are_skipped_and_counted_and_as_is_publishes_them(tmp_path,
                                                                          ros_domain):
    frames = [frame(0), frame(1, short=True), frame(2), frame(3, encoding="garbage"),
              frame(4)]
    bag = write_bag(tmp_path / "garbage.mcap", frames)
    report = eval_bag(bag, tmp_path)
    assert report.returncode == 0, report.stderr
    assert json.loads((tmp_path / "garbage.json").read_text())["frames_bad_input"] == 2
    camera = Listener(ros_domain, {CAMERA: TYPES["image"]})
    stamps = lambda: [header_stamp_ns(raw) for _, raw in camera.got[CAMERA]]  # noqa: E731
    try:
        got = run("bag", "replay", str(bag), "--rate", "4", "--wait-for", CAMERA,
                  domain=ros_domain)
        assert got.returncode == 0, got.stderr
        assert "[replay] done: 3 messages published" in got.stderr
        notes = [line for line in got.stderr.splitlines() if line.startswith("note:")]
        assert notes == ["note: skipped 2 camera messages the node would drop "
                         "(image_data_short 1, image_encoding 1); --as-is publishes them"]
        wait_for(lambda: len(stamps()) >= 3)
        time.sleep(0.5)
        assert stamps() == [frames[i][0] for i in (0, 2, 4)]
        got = run("bag", "replay", str(bag), "--rate", "4", "--as-is", "--wait-for", CAMERA,
                  domain=ros_domain)
        assert got.returncode == 0 and "note:" not in got.stderr, got.stderr
        assert "[replay] done: 5 messages published" in got.stderr
        wait_for(lambda: len(stamps()) >= 8)
        assert stamps()[3:] == [stamp for stamp, _ in frames]
    finally:
        camera.close()


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
