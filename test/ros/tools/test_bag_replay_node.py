"""Replaying a bag into a running `planner_node` through DDS: the node answers the replayed
frames, matched by the image stamps it copies onto its outputs."""
from __future__ import annotations

import pytest
from bag_live import FAST_TINY, OUT, camera_stamps, replay_into_node, status_stamps

from wamdiff2_ros.tools.demo import node_counters

pytestmark = pytest.mark.ros


def test_replay_reaches_the_node_which_answers_every_replayed_frame(small_bag, ros_domain,
                                                                    tmp_path):
    recorder = replay_into_node(small_bag, ros_domain, tmp_path, FAST_TINY, rate=0.5,
                                timeout_s=60)
    stamps = camera_stamps(small_bag)
    assert len(stamps) == 4
    assert set(stamps) <= status_stamps(recorder)      # one answer per replayed frame


def test_with_sim_time_the_node_runs_on_the_bags_clock(small_bag, ros_domain, tmp_path):
    """`bag replay --clock` and `use_sim_time`: the bag's old stamps are fresh on the bag's
    clock, so every frame is planned with its odometry under the shipped age limits (on the
    wall clock each one would be dropped as stale)."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.serialization import deserialize_message

    from wamdiff2_ros.tools.bag_io import header_stamp_ns

    # reliable frames: a frame lost on the way is delivery's failure, not the clock's
    overrides = dict(FAST_TINY, use_sim_time=True, max_input_age_s=1.0,
                     max_odometry_age_s=0.5, camera_qos="reliable")
    recorder = replay_into_node(small_bag, ros_domain, tmp_path, overrides, rate=0.5,
                                timeout_s=60, clock=True)
    reasons = {}
    for item in recorder.messages(OUT.status):
        msg = deserialize_message(item.raw, DiagnosticArray)
        reasons[header_stamp_ns(item.raw)] = {kv.key: kv.value
                                              for kv in msg.status[0].values}["reason"]
    stamps = camera_stamps(small_bag)
    assert set(stamps) <= set(reasons), (stamps, reasons, node_counters(recorder),
                                         (tmp_path / "node.log").read_text()[-3000:])
    # the untrained preset's answers do not parse: planned by the model, not refused
    assert {reasons[s] for s in stamps} == {"parse_failures"}, reasons
