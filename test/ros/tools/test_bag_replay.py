"""`bag replay`: recorded messages reach live subscribers, at recorded timing, remapped;
Ctrl-C stops cleanly. Real DDS, the real `wamdiff2` command, a ROS_DOMAIN_ID per test."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from bag_fixtures import WAMDIFF2
from bag_live import Listener
from rclpy.serialization import deserialize_message

from wamdiff2_ros.tools.bag_io import BagReader, message_class
from wamdiff2_ros.tools.bag_layout import SIM_TOPICS

pytestmark = pytest.mark.ros


def _env(domain: int) -> dict:
    return dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")


def test_replayed_messages_equal_the_bag_at_recorded_timing_and_remapped(small_bag,
                                                                          ros_domain):
    with BagReader(small_bag) as bag:
        recorded = {t: [(ns, raw) for _, _, ns, raw in bag.messages([t])] for t in bag.topics}
        types = {t: info.msgtype for t, info in bag.topics.items()}
    remapped = "/replay_test/image"
    listen = {remapped if t == SIM_TOPICS.image else t: ty for t, ty in types.items()}
    listener = Listener(ros_domain, listen)
    try:
        proc = subprocess.run(
            [WAMDIFF2, "bag", "replay", str(small_bag), "--rate", "2",
             "--remap", f"{SIM_TOPICS.image}:={remapped}", "--wait-for", SIM_TOPICS.image,
             SIM_TOPICS.odometry, SIM_TOPICS.gt_meta],
            env=_env(ros_domain), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        total = sum(len(v) for v in recorded.values())
        assert f"done: {total} messages published" in proc.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(listener.got[remapped]) < 4:
            time.sleep(0.1)
    finally:
        listener.close()
    for topic, msgtype in types.items():
        got = listener.got[remapped if topic == SIM_TOPICS.image else topic]
        want = recorded[topic]
        assert len(got) == len(want), topic
        cls = message_class(msgtype)
        for (_, raw_got), (_, raw_want) in zip(got, want):
            # values, not bytes: the transport may pad the payload
            assert deserialize_message(raw_got, cls) == deserialize_message(raw_want, cls)
    # Recorded camera frames at 1.0, 1.5, 3.6, 4.1 s: 3.1 s of bag time, 1.55 s at x2.
    arrivals = [t for t, _ in listener.got[remapped]]
    span = arrivals[-1] - arrivals[0]
    assert 1.2 < span < 2.6, span
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert gaps[1] > 2 * gaps[0]            # the 2.1 s gap between the episodes


def test_ctrl_c_stops_a_looping_replay_cleanly(small_bag, ros_domain):
    proc = subprocess.Popen([WAMDIFF2, "bag", "replay", str(small_bag), "--loop"],
                            env=_env(ros_domain), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(8.0)                              # imports, then a few messages
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped (Ctrl-C)" in err
    assert "Traceback" not in err and "Traceback" not in out


def test_unknown_remap_and_missing_topic_are_one_line_errors(small_bag, ros_domain):
    for extra, message in ((["--topics", "/nope"], "has no topic /nope"),
                           (["--remap", "/nope:=/x"], "not replayed: /nope")):
        proc = subprocess.run([WAMDIFF2, "bag", "replay", str(small_bag), *extra],
                              env=_env(ros_domain), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_clock_publishes_the_bags_time_and_restarts_it_on_a_loop(small_bag, ros_domain):
    """`--clock`: /clock follows bag time (never behind a message just published), from
    the bag's start to its end, and starts again at the start on every loop."""
    from rosgraph_msgs.msg import Clock

    with BagReader(small_bag) as bag:
        first, last = bag.start_ns, bag.end_ns
    listener = Listener(ros_domain, {"/clock": "rosgraph_msgs/msg/Clock"})
    proc = subprocess.Popen([WAMDIFF2, "bag", "replay", str(small_bag), "--rate", "4",
                             "--clock", "50", "--loop", "--quiet"], env=_env(ros_domain),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def clocks() -> list[int]:
            with listener.lock:
                raw = [r for _, r in listener.got["/clock"]]
            return [c.clock.sec * 10**9 + c.clock.nanosec
                    for c in (deserialize_message(r, Clock) for r in raw)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(       # two restarts: one whole loop
                b < a for a, b in zip(clocks(), clocks()[1:])) < 2:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()
    assert proc.returncode == 0, err
    ticks = clocks()
    assert len(ticks) > 20 and all(first <= t <= last for t in ticks)
    jumps = [i for i, (a, b) in enumerate(zip(ticks, ticks[1:])) if b < a]
    assert len(jumps) >= 2, "the loop never restarted the clock twice"
    # the first loop's start may pass before discovery (slow under load): check a whole one
    loop = ticks[jumps[0] + 1:jumps[1] + 1]
    assert loop == sorted(loop) and loop[-1] - loop[0] > 0.5 * (last - first)


def test_clock_rate_must_be_sensible(small_bag, ros_domain):
    proc = subprocess.run([WAMDIFF2, "bag", "replay", str(small_bag), "--clock", "-5"],
                          env=_env(ros_domain), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "clock" in proc.stderr and "Traceback" not in proc.stderr
