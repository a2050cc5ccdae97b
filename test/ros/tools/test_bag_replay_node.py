"""Replaying a bag into a running `planner_node` through DDS: the node answers the replayed
frames, matched by the image stamps it copies onto its outputs."""
from __future__ import annotations

import pytest
from bag_live import FAST_TINY, camera_stamps, replay_into_node, status_stamps

pytestmark = pytest.mark.ros


def test_replay_reaches_the_node_which_answers_every_replayed_frame(small_bag, ros_domain,
                                                                    tmp_path):
    recorder = replay_into_node(small_bag, ros_domain, tmp_path, FAST_TINY, rate=0.5,
                                timeout_s=60)
    stamps = camera_stamps(small_bag)
    assert len(stamps) == 4
    assert set(stamps) <= status_stamps(recorder)      # one answer per replayed frame
