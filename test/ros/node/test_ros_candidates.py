"""Candidate plans out of the node: the PointCloud2 a downstream node reads (round trip on
the wire), the markers RViz draws, the scorer's choice and margin in ~/output/status, and
the real node with the bundled model publishing them to a plain subscriber."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

from ros_harness import NodeProcess, RosClient, stamp_s
from sim_frames import sim_frames

from wamdiff2_core.candidates import Candidate, CandidateSet, Selection
from wamdiff2_core.types import bundled_checkpoint_path
from wamdiff2_ros.node import params
from wamdiff2_ros.node.candidates import (candidate_markers, candidates_cloud,
                                          read_candidates, status_values)

T = np.arange(1, 9)[:, None] * 0.5


def _set(fallback: str = "") -> CandidateSet:
    plans = [np.hstack([T * v, T * lat]) for v, lat in ((10, 0), (9, 0.5), (11, -0.5))]
    cands = [Candidate(p, "", "straight", 0.7, (0.9, 0.8)) for p in plans]
    cands.insert(2, Candidate(None, "junk", "straight", 0.7, (0.1,), "not numbers"))
    return CandidateSet(cands, Selection("rules", [0.4, 0.9, -math.inf, 0.2], 1, 0.5,
                                         fallback))


def test_the_cloud_round_trips_on_the_wire():
    header = Header(stamp=Time(sec=7, nanosec=5), frame_id="base_link")
    msg = deserialize_message(serialize_message(candidates_cloud(_set(), header)),
                              PointCloud2)
    assert msg.header == header and msg.width == 3 * 8
    got = read_candidates(msg)
    assert [c["candidate"] for c in got] == [0, 1, 3]               # the unparsed one left out
    assert [c["chosen"] for c in got] == [False, True, False]
    assert got[1]["score"] == pytest.approx(0.9)
    assert got[0]["log_confidence"] == pytest.approx(np.mean(np.log([0.9, 0.8])), abs=1e-6)
    assert np.allclose(got[1]["waypoints"], _set().candidates[1].waypoints, atol=1e-5)


def test_markers_and_status_say_what_was_chosen():
    markers = candidate_markers(_set(), Header(frame_id="base_link"))
    lines = [m for m in markers if m.type == Marker.LINE_STRIP]
    assert len(lines) == 3 and all(len(m.points) == 9 for m in lines)
    assert max(lines, key=lambda m: m.scale.x).id == 2 * 1          # the chosen is thickest
    assert status_values(_set()) == {"candidates": "4", "candidates.valid": "3",
                                     "scorer": "rules", "scorer.chosen": "1",
                                     "scorer.margin": "0.5", "scorer.fallback": ""}
    assert status_values(_set("scorer learned failed"))["scorer.fallback"] == \
        "scorer learned failed"


def _defaults() -> dict:
    return {p.name: p.default for p in params.PARAMS}


@pytest.mark.parametrize("name, value, words", [
    ("candidates.k", 17, "1..16"), ("candidates.scorer", "oracle", "'oracle' is not one of"),
    ("candidates.diversity", "beam", "'beam' is not one of"),
])
def test_candidate_parameters_out_of_range_are_refused(name, value, words):
    with pytest.raises(ValueError, match=words):
        params.node_config(dict(_defaults(), **{name: value}))


@pytest.mark.ros
@pytest.mark.skipif(bundled_checkpoint_path() is None, reason="needs the bundled model (a "
                    "constrained plan parses; an untrained preset's do not)")
def test_the_node_publishes_candidates_a_plain_subscriber_reads(ros_domain, tmp_path):
    node = NodeProcess(ros_domain, tmp_path, {
        "max_input_age_s": 0.0, "plan_timeout_s": 0.0, "max_odometry_age_s": 0.0,
        "max_path_gap_s": 0.0, "candidates.k": 4, "candidates.scorer": "rules"})
    client = RosClient(ros_domain)
    clouds, lock = [], threading.Lock()

    def keep(msg):
        with lock:
            clouds.append(msg)
    client.node.create_subscription(
        PointCloud2, "/wamdiff2_planner/output/candidates", keep,
        QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                   reliability=ReliabilityPolicy.RELIABLE))
    try:
        client.wait_ready(node, timeout=300)
        client.wait_matched(client.image_pub)
        for frame in sim_frames(6, 320, 180):
            stamp = client.publish_frame(frame.rgb)
            status = client.wait_status(stamp, timeout=180)
            if status["source"] == "model":
                break
        else:
            pytest.fail("no frame got a model Path")
        assert status["candidates"] == "4" and status["scorer"] == "rules"
        assert status["scorer.fallback"] == "" and float(status["scorer.margin"]) >= 0

        def cloud_for():
            with lock:
                return next((m for m in clouds
                             if abs(stamp_s(m.header.stamp) - stamp) < 1e-6), None)
        cloud = client.wait_for(cloud_for, 60, f"the candidates of frame {stamp:.3f}")
        got = read_candidates(cloud)
        assert 1 <= len(got) <= 4 and sum(c["chosen"] for c in got) == 1
        chosen = next(c for c in got if c["chosen"])
        assert chosen["candidate"] == int(status["scorer.chosen"])
        path = next(m for _, m in client.messages("path")
                    if abs(stamp_s(m.header.stamp) - stamp) < 1e-6)
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        assert np.allclose(xy, chosen["waypoints"], atol=1e-3)     # the Path is the choice
        assert cloud.header.frame_id == path.header.frame_id
    finally:
        client.close()
        node.stop()
