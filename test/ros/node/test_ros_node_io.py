"""The node end to end over real DDS: simulator frames in; Path, markers, answers out.

Two processes per test module: `planner_node` started from the params file, and a client
node in the test process, on a ROS_DOMAIN_ID of their own.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from nav_msgs.msg import Odometry
from std_msgs.msg import String
from visualization_msgs.msg import Marker

from ros_harness import (FAST_TINY, NodeProcess, RosClient, stamp_msg, stamp_s,
                         status_stamp)
from sim_frames import sim_frames

from wamdiff2_core.tasks import parse_waypoints

pytestmark = pytest.mark.ros


def _bundled_model():
    """The bundled default model's path, or None while the training issue has not shipped it."""
    from wamdiff2_core import planner
    find = getattr(planner, "bundled_checkpoint_path", None)
    return find() if callable(find) else None


@pytest.fixture(scope="module")
def tiny_node(module_ros_domain, tmp_path_factory):
    """One untrained-preset node for this module's tests, and a client on its domain."""
    node = NodeProcess(module_ros_domain, tmp_path_factory.mktemp("node"), FAST_TINY)
    client = RosClient(module_ros_domain)
    try:
        client.wait_ready(node)
        client.wait_matched(client.image_pub)
        yield node, client
    finally:
        client.close()
        node.stop()


def test_planned_frame_gets_markers_with_its_stamp_and_frame(tiny_node):
    node, client = tiny_node
    for frame in sim_frames(3, 640, 360):
        stamp = client.publish_frame(frame.rgb)
        markers = client.wait_answered(stamp)
        # The node clears what it drew before, then draws this frame's markers.
        assert markers.markers[0].action == Marker.DELETEALL
        status = [m for m in markers.markers if m.ns == "wamdiff2/status"]
        assert len(status) == 1 and status[0].header.frame_id == "base_link"
        assert status_stamp(markers) == pytest.approx(stamp, abs=1e-9)
    assert node.alive()


def test_1280x720_frames_arrive_with_the_default_qos(tiny_node):
    _, client = tiny_node
    frame = sim_frames(1, 1280, 720)[0]
    stamp = client.publish_frame(frame.rgb)
    client.wait_answered(stamp)


def test_question_is_answered_on_the_latest_image(tiny_node):
    _, client = tiny_node
    before = len(client.messages("answer"))
    client.publish_frame(sim_frames(1, 640, 360)[0].rgb)
    client.question_pub.publish(String(data="Is there a vehicle ahead in the ego lane?"))
    client.wait_for(lambda: len(client.messages("answer")) > before, 120,
                    "an answer on ~/output/answer")
    answer = client.messages("answer")[-1][1]
    assert isinstance(answer.data, str) and answer.data.strip()


def _publish_odometry(client: RosClient, t: float, x: float, yaw: float, vx: float) -> None:
    msg = Odometry()
    msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp_msg(t), "odom", \
        "base_link"
    msg.pose.pose.position.x = x
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), \
        math.cos(yaw / 2)
    msg.twist.twist.linear.x = vx
    client.odometry_pub.publish(msg)


def _frame_motion(client, frame, yaw: float = 0.0):
    """Odometry at the simulator frame's own speed, so the prompt carries a real velocity."""
    t0 = client.now()
    for k in range(3):
        _publish_odometry(client, t0 - 0.2 + 0.1 * k, frame.velocity[0] * 0.1 * k, yaw,
                          frame.velocity[0])
    time.sleep(0.2)


def _path_for(client, stamp: float):
    return next((m for _, m in client.messages("path")
                 if stamp_s(m.header.stamp) == pytest.approx(stamp, abs=1e-9)), None)


def _publish_until_path(client, frames, frame_id, before=_frame_motion):
    """Publish frames one by one (calling `before` ahead of each) until the model answers
    one of them with a Path in `frame_id` (~/output/status: source model); returns (stamp,
    path, what `before` returned). Every frame gets a Path (the fallback when the model's
    answer does not parse); the wait is for the frame's status and its own Path, each on
    its own topic, so neither may trail the other. Fails if no frame gets a model Path."""
    for frame in frames:
        ctx = before(client, frame)
        stamp = client.publish_frame(frame.rgb)
        status = client.wait_status(stamp, timeout=120)
        path = client.wait_for(lambda: _path_for(client, stamp), 60, f"the Path of {stamp}")
        if status["source"] == "model" and path.header.frame_id == frame_id:
            return stamp, path, ctx
    pytest.fail(f"none of {len(frames)} frames got a model Path in {frame_id}")


@pytest.mark.skipif(_bundled_model() is None,
                    reason="no bundled default model yet (wamdiff2_core.planner."
                           "bundled_checkpoint_path() is None): the training issue ships it; "
                           "an untrained preset never produces a parseable path")
def test_path_of_8_poses_from_the_bundled_model(ros_domain, tmp_path):
    # The params file as shipped, but for the frame age and the plan timeout: on a loaded
    # machine a frame may wait more than max_input_age_s before planning starts, or a plan
    # take longer than plan_timeout_s (each has a test of its own); this test needs plans.
    node = NodeProcess(ros_domain, tmp_path, {"max_input_age_s": 0.0, "plan_timeout_s": 0.0})
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(client.image_pub)
        assert "Loading weights" not in node.output()        # no progress bar in a node's log
        # The bundled CPU model does not produce a parseable plan for every frame (see the
        # training note), so frames are sent one at a time until one is planned; every frame
        # is answered (markers say "no plan" when the answer does not parse).
        frames = sim_frames(18, 320, 180)                 # the bundle's training camera
        # heading +y as in the odom-frame part below: odometry that turned 90 degrees at
        # speed between the two parts would imply an implausible acceleration, and the node
        # rightly drops such samples (it did, when the parts ran less than a gap apart)
        facing_y = (lambda client, frame: _frame_motion(client, frame, math.pi / 2))
        stamp, path, _ = _publish_until_path(client, frames, "base_link", facing_y)
        assert len(path.poses) == 8
        assert path.header.frame_id == "base_link"
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        assert np.all(np.isfinite(xy))
        for k, pose in enumerate(path.poses):
            q = pose.pose.orientation
            assert q.z ** 2 + q.w ** 2 == pytest.approx(1.0)
            assert stamp_s(pose.header.stamp) == pytest.approx(stamp + 0.5 * (k + 1),
                                                              abs=1e-6)
        markers = client.wait_answered(stamp)
        line = [m for m in markers.markers if m.type == Marker.LINE_STRIP]
        assert len(line) == 1 and len(line[0].points) == 8

        # A question outside the trained templates: free text, non-blank under the shipped
        # `decode.constrained: true`, counted as an answer (never a planning parse failure).
        parse_failures = client.counter("parse_failures")
        client.question_pub.publish(String(data="Which poem does the sky remind you of?"))
        client.wait_for(lambda: client.messages("answer"), 120, "an answer")
        assert client.messages("answer")[-1][1].data.strip()
        client.wait_for(lambda: client.counter("questions_answered") >= 1, 30,
                        "questions_answered on /diagnostics")
        assert client.counter("answer_failures") == 0
        assert client.counter("parse_failures") == parse_failures

        # The odom-frame variant: the same kind of path, placed with the odometry pose at the
        # image stamp (odometry runs ahead of the frame so the pose is known when it plans).
        assert client.set_parameters({"path_in_odom": True})[0].successful

        last = [0.0]                                  # odometry stamps must only increase

        def odometry_ahead(client, frame):
            # x = 10 + v (t - t0), yaw 90 deg, v the frame's own speed (a realistic prompt);
            # samples from just before to well after the frame's stamp
            t0, v = client.now(), frame.velocity[0]
            for k in range(-3, 10):
                t = t0 + 0.1 * k
                if t > last[0]:
                    _publish_odometry(client, t, 10.0 + v * (t - t0), math.pi / 2, v)
                    last[0] = t
            time.sleep(0.3)
            return t0, v

        stamp, path, (t0, v) = _publish_until_path(client, frames, "odom", odometry_ahead)
        assert len(path.poses) == 8 and stamp_s(path.header.stamp) == pytest.approx(stamp)
        # Ego at (10 + v (stamp - t0), 0) facing +y: ahead in the ego frame is +y in odom,
        # left is -x. The model's own waypoints (its answer on ~/output/stats) placed there:
        text = client.wait_for(lambda: (client.stats_for(stamp) or {}).get("planning.text"),
                               30, f"the stats of frame {stamp:.3f}")
        ego = parse_waypoints(text)
        odom = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        origin_x = 10.0 + v * (stamp - t0)
        np.testing.assert_allclose(odom[:, 0], origin_x - ego[:, 1], atol=0.02)
        np.testing.assert_allclose(odom[:, 1], ego[:, 0], atol=0.02)
    finally:
        client.close()
        node.stop()
