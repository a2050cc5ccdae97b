"""The node with `decode.mode: exact` over real DDS: it loads its verifier when it configures
(a preset without a teacher: its own weights read token by token), logs the exact mode it
decodes with and answers frames; a checkpoint that cannot draft fails configure with the
sentence (docs/decoding.md, "Exact mode")."""
from __future__ import annotations

import pytest
from ros_harness import FAST_TINY, NodeProcess, RosClient
from sim_frames import sim_frames

pytestmark = pytest.mark.ros


def test_an_exact_mode_node_plans(ros_domain, tmp_path):
    node = NodeProcess(ros_domain, tmp_path, dict(FAST_TINY, **{"decode.mode": "exact"}))
    client = RosClient(ros_domain)
    try:
        client.wait_ready(node)
        client.wait_matched(client.image_pub)
        for frame in sim_frames(2, 640, 360):
            client.wait_answered(client.publish_frame(frame.rgb))
        assert "decoding with exact (the verifier's greedy answers)" in node.output()
        assert node.alive()
    finally:
        client.close()
        node.stop()


def test_an_ar_checkpoint_in_exact_mode_fails_configure_with_the_reason(ros_domain, tmp_path):
    node = NodeProcess(ros_domain, tmp_path, dict(FAST_TINY, **{"decode.mode": "exact",
                                                                "model.paradigm": "ar"}))
    client = RosClient(ros_domain)
    try:
        client.wait_for(lambda: "exact mode drafts with a diffusion model" in node.output(),
                        120, "the configure failure's reason in the node's log")
        assert node.alive()                             # it stays up, unconfigured
    finally:
        client.close()
        node.stop()
