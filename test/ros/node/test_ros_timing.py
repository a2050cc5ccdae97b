"""The node's timing contract over real DDS (issue 55; docs/ros.md, "Timing contract").

The real node process and a client on its own ROS domain. Every test asserts, for every
frame it sends, one Path and that Path's source (the model, or which fallback): a question
load beside a 2 Hz camera, a plan timeout below the plan time, two cameras whatever the
arrival order, a re-warm while frames stream, the watchdog.
"""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from std_msgs.msg import String
from test_ros_cameras import RIG, rig_checkpoint  # noqa: F401 - a fixture

from ros_harness import (FAST_TINY, NodeProcess, RosClient, diag_values, rgb_image_msg,
                         stamp_s)
from sim_frames import sim_frames

pytestmark = pytest.mark.ros
# A plan of many forward passes whatever the machine: 64 tokens, one per denoising step.
SLOW_TINY = dict(FAST_TINY, **{"decode.max_new_tokens": 64, "decode.steps_per_block": 32,
                               "decode.commit_rule": "low_confidence_static"})


def _paths_per_frame(client: RosClient) -> Counter:
    return Counter(round(stamp_s(m.header.stamp), 6) for _, m in client.messages("path"))


def _path_received(client: RosClient, stamp: float) -> float:
    """When the Path of the frame stamped `stamp` arrived (client monotonic)."""
    return min(t for t, m in client.messages("path")
               if abs(stamp_s(m.header.stamp) - stamp) < 1e-6)


def _stream(client: RosClient, rgb: np.ndarray, rate_hz: float, seconds: float,
            every=None) -> list[tuple[float, float]]:
    """Frames at `rate_hz` for `seconds` ((stamp, sent monotonic) each); `every(i)` runs
    each 100 ms tick (a question load)."""
    msg, sent = rgb_image_msg(rgb, 0.0), []
    start = time.monotonic()
    ticks_per_frame = max(1, round(10 / rate_hz))
    for i in range(int(seconds * 10)):
        time.sleep(max(0.0, start + i / 10 - time.monotonic()))
        if every is not None:
            every(i)
        if i % ticks_per_frame == 0:
            t = client.now()
            msg.header.stamp = rgb_image_msg(rgb, t).header.stamp
            client.image_pub.publish(msg)
            sent.append((t, time.monotonic()))
    return sent


def _statuses(client: RosClient, sent, timeout: float = 120.0) -> list[dict]:
    """Each sent frame's Path status; a frame without one fails naming the node's counters
    of frames it may drop (replaced, stale), so that a failure says why."""
    try:
        client.wait_for(lambda: all(client.status_for(t) for t, _ in sent), timeout,
                        "a Path status for every frame")
    except AssertionError:
        missing = [round(t, 3) for t, _ in sent if client.status_for(t) is None]
        counters = {k: client.counter(k) for k in (
            "frames_received", "paths_published", "dropped_frames", "stale_frames",
            "plan_timeouts", "path_gaps")}
        raise AssertionError(f"frames without a Path: {missing}; {counters}") from None
    return [client.status_for(t) for t, _ in sent]


def test_a_question_every_100ms_does_not_take_the_model_from_a_2hz_camera(ros_domain,
                                                                          tmp_path):
    """The bundled model, shipped params: every frame one Path within plan_timeout_s plus
    one forward (its arrival as the anchor), from the model (a plan_timeouts fallback
    only where the machine was too slow); every question answered or refused, and every
    refusal counted with its reason. (No odometry is sent, and no frame is dropped for age:
    on a loaded CI machine a plan can take over max_input_age_s.)"""
    node = NodeProcess(ros_domain, tmp_path, {"max_odometry_age_s": 0.0,
                                              "max_input_age_s": 0.0})
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(client.image_pub)
        client.wait_matched(client.question_pub)
        rgb = sim_frames(1, 640, 360)[0].rgb
        asked = []

        def ask(i):
            client.question_pub.publish(String(data=f"Is lane {i} clear?"))
            asked.append(i)

        sent = _stream(client, rgb, 2.0, 10.0, ask)
        statuses = _statuses(client, sent)
        client.wait_for(lambda: len(client.messages("answer")) >= len(asked), 120,
                        "an answer or a refusal for every question")
        client.wait_for(lambda: sum(client.counter(k) for k in (
            "questions_answered", "questions_refused", "answer_failures")) >= len(asked),
            30, "every question counted")
        time.sleep(1.0)
        paths = _paths_per_frame(client)
        latencies = [_path_received(client, t) - at for t, at in sent]
        counters = {k: client.counter(k) for k in (
            "questions_answered", "questions_refused", "answer_failures", "question_timeout",
            "question_preempted", "questions_dropped", "question_too_long")}
    finally:
        client.close()
        node.stop()
    assert all(paths[round(t, 6)] == 1 for t, _ in sent), paths
    sources = Counter((s["source"], s["reason"]) for s in statuses)
    assert set(sources) <= {("model", ""), ("last_plan", "plan_timeouts"),
                            ("stop", "plan_timeouts")}, sources
    assert sources[("model", "")] >= len(sent) // 2, sources
    assert max(latencies) < 3.0 + 1.5, latencies          # plan_timeout_s + one forward
    assert len(client.messages("answer")) == len(asked)
    assert counters["questions_answered"] + counters["questions_refused"] + \
        counters["answer_failures"] == len(asked), counters
    assert counters["questions_refused"] == counters["question_timeout"] + \
        counters["question_preempted"] + counters["questions_dropped"] + \
        counters["question_too_long"], counters
    print(f"2 Hz + 10 Hz questions: {len(sent)} frames, {sum(paths.values())} Paths, "
          f"sources {dict(sources)}, frame -> Path p50 {np.median(latencies) * 1e3:.0f} ms, "
          f"max {max(latencies) * 1e3:.0f} ms; questions {counters}")


def test_a_plan_timeout_below_the_plan_time_gives_every_frame_a_prompt_fallback(ros_domain,
                                                                               tmp_path):
    """plan_timeout_s 0.01 s, a plan of 64 forwards, a 5 Hz camera: every frame its own
    plan_timeouts fallback at its deadline (none superseded, none late, no model Path); the
    decodes are cancelled, so once the timeout is lifted the next frame is planned at once
    (no late decode queued before it)."""
    node = NodeProcess(ros_domain, tmp_path, dict(SLOW_TINY, plan_timeout_s=0.01))
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(client.image_pub)
        rgb = sim_frames(1, 320, 180)[0].rgb
        sent = _stream(client, rgb, 5.0, 4.0)
        statuses = _statuses(client, sent)
        latencies = [_path_received(client, t) - at for t, at in sent]
        cancelled = client.diagnostics_with(lambda st, v: "its decode cancelled" in st.message)
        dropped = client.counter("dropped_frames")
        assert client.set_parameters({"plan_timeout_s": 0.0})[0].successful
        time.sleep(0.5)
        t = client.publish_frame(rgb)
        after = client.wait_status(t, 300)
        paths = _paths_per_frame(client)
    finally:
        client.close()
        node.stop()
    assert all(paths[round(s, 6)] == 1 for s, _ in sent), paths
    assert {(s["source"], s["reason"]) for s in statuses} <= {
        ("stop", "plan_timeouts"), ("last_plan", "plan_timeouts")}, statuses
    assert dropped == 0
    assert max(latencies) < 0.01 + 1.5, latencies         # the deadline + one forward
    assert cancelled, "no decode was cancelled"
    # the model's own answer at once (an untrained tiny model's plan may not parse)
    assert after["reason"] in ("", "parse_failures"), after


def test_two_cameras_with_equal_stamps_plan_whatever_the_arrival_order(
        ros_domain, tmp_path, rig_checkpoint):  # noqa: F811 - the fixture
    """A hardware-synchronised rig: both images stamped alike, the side image published
    50 ms before, with, or 5, 20, 50 ms after the trigger's: every frame planned by the
    model with both images."""
    node = NodeProcess(ros_domain, tmp_path, {
        "checkpoint": str(rig_checkpoint), "cameras": list(RIG), "tasks": ["planning"],
        "max_odometry_age_s": 0.0, "plan_timeout_s": 0.0, "max_input_age_s": 0.0,
        "max_path_gap_s": 0.0, "decode.max_new_tokens": 96, "decode.steps_per_block": 4})
    client = RosClient(ros_domain)
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    front = client.node.create_publisher(Image, "/wamdiff2_planner/input/front/image", qos)
    left = client.node.create_publisher(Image, "/wamdiff2_planner/input/left/image", qos)
    frames = sim_frames(2, 320, 180)
    results = []
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(front)
        client.wait_matched(left)
        for offset in (-0.05, 0.0, 0.005, 0.02, 0.05) * 2:
            t = client.now()
            if offset < 0:
                left.publish(rgb_image_msg(frames[1].rgb, t, "camera_left"))
                time.sleep(-offset)
            front.publish(rgb_image_msg(frames[0].rgb, t))
            if offset >= 0:
                time.sleep(offset)
                left.publish(rgb_image_msg(frames[1].rgb, t, "camera_left"))
            status = client.wait_status(t, 300)
            stats = client.wait_for(lambda: client.stats_for(t), 60, "the frame's stats")
            results.append((offset, status["source"], status["reason"], stats["images"]))
        paths = _paths_per_frame(client)
    finally:
        client.close()
        node.stop()
    assert all(r[1:] == ("model", "", "2") for r in results), results
    assert set(paths.values()) == {1}, paths


def test_a_rewarm_while_frames_stream_leaves_no_frame_without_a_path(ros_domain, tmp_path):
    """decode.steps_per_block changed at run time while a 2 Hz camera streams: the change
    is accepted at once, every frame gets one Path from the model (the old planner's until
    the new one is warm), and the new setting is in effect after."""
    node = NodeProcess(ros_domain, tmp_path, dict(FAST_TINY, **{
        "decode.constrained": True, "decode.max_new_tokens": 96}))
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(client.image_pub)
        rgb = sim_frames(1, 320, 180)[0].rgb
        results = []

        def change(i):
            if i == 20:                                  # 2 s into the stream
                results.append(client.set_parameters({"decode.steps_per_block": 8})[0])

        sent = _stream(client, rgb, 2.0, 8.0, change)
        statuses = _statuses(client, sent)
        in_effect = client.wait_for(lambda: client.diagnostics_with(
            lambda st, v: "steps: 8," in v.get("decode", "")), 120, "the new planner in use")
        t = client.publish_frame(rgb)
        last = client.wait_status(t, 120)
        paths = _paths_per_frame(client)
    finally:
        client.close()
        node.stop()
    assert results and results[0].successful, results
    assert all(paths[round(s, 6)] == 1 for s, _ in sent), paths
    assert all((s["source"], s["reason"]) == ("model", "") for s in statuses), statuses
    assert in_effect and (last["source"], last["reason"]) == ("model", "")


def test_the_watchdog_publishes_a_fallback_when_paths_stop(ros_domain, tmp_path):
    """plan_timeout_s 0 (wait for the plan) and a plan far slower than max_path_gap_s
    (0.3 s; 256 forwards): while a 10 Hz camera streams, the watchdog publishes fallback
    Paths (path_gaps) and /diagnostics turns ERROR naming the cause; never two Paths for a
    frame."""
    node = NodeProcess(ros_domain, tmp_path, dict(SLOW_TINY, **{
        "decode.max_new_tokens": 256, "max_path_gap_s": 0.3}))
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(client.image_pub)
        rgb = sim_frames(1, 320, 180)[0].rgb
        _stream(client, rgb, 10.0, 3.0)
        client.wait_for(lambda: client.diagnostics_with(
            lambda st, v: st.level == b"\x02" and "path_gaps" in st.message), 60,
            "an ERROR naming path_gaps")
        errors = client.diagnostics_with(
            lambda st, v: st.level == b"\x02" and "path_gaps" in st.message)
        statuses = [{kv.key: kv.value for kv in m.status[0].values}
                    for _, m in client.messages("status")]
        paths = _paths_per_frame(client)
    finally:
        client.close()
        node.stop()
    reasons = Counter(s["reason"] for s in statuses)
    assert reasons["path_gaps"] >= 1, reasons
    assert set(reasons) <= {"path_gaps", "", "parse_failures"}, reasons
    assert "while frames arrive" in errors[0].status[0].message
    assert "the model has been planning frame" in errors[0].status[0].message or \
        "waited" in errors[0].status[0].message
    assert set(paths.values()) == {1}, paths
    assert int(diag_values(errors[-1])["path_gaps"]) >= 1
