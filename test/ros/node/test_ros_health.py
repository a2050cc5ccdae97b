"""/diagnostics tell the truth about the node (issue 15): the lifecycle state, a failed
configure, silent inputs, stale odometry (and what is published then), time that jumps
back, cleanup; the status name carries the namespace; the shutdown transition ends the
process. One node process in namespace /ego, driven through its lifecycle services."""
from __future__ import annotations

import time

import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from lifecycle_msgs.msg import Transition

from ros_harness import FAST_TINY, NodeProcess, RosClient, diag_values
from sim_frames import sim_frames

pytestmark = pytest.mark.ros
OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
NAME = "/ego/wamdiff2_planner"


def _wait_diag(client: RosClient, level: bytes, text: str, after: float = 0.0,
               timeout: float = 120.0):
    """The first /diagnostics status of this node, received after monotonic `after`, with
    `level` and `text` in its message."""
    def found():
        for at, m in client.messages("diagnostics"):
            st = m.status[0] if m.status else None
            if at >= after and st is not None and st.name == f"{NAME}: planner" \
                    and st.level == level and text in st.message:
                return st
        return None
    return client.wait_for(found, timeout, f"a {level!r} diagnostic saying {text!r}")


def _counter_rises(client: RosClient, name: str, before: int, timeout: float = 60.0) -> None:
    client.wait_for(lambda: client.counter(name) > before, timeout, f"{name} > {before}")


def test_diagnostics_follow_the_lifecycle_and_the_inputs(ros_domain, tmp_path):
    overrides = dict(FAST_TINY, autostart=False, checkpoint="/nonexistent/checkpoint",
                     max_odometry_age_s=0.5, input_timeout_s=1.0, max_input_age_s=0.0)
    node = NodeProcess(ros_domain, tmp_path, overrides, ros_args=["-r", "__ns:=/ego"])
    client = RosClient(ros_domain, node=NAME)
    try:
        # Unconfigured is not OK, and the status is named after the node's full name.
        _wait_diag(client, WARN, "unconfigured")
        # A failed configure is an ERROR, and stays one past the 5 s problem window.
        assert not client.lifecycle(Transition.TRANSITION_CONFIGURE)
        _wait_diag(client, ERROR, "configure failed")
        _wait_diag(client, ERROR, "configure failed", after=time.monotonic() + 6.0)
        assert client.set_parameters({"checkpoint": "tiny"})[0].successful
        assert client.lifecycle(Transition.TRANSITION_CONFIGURE)
        _wait_diag(client, WARN, "inactive")
        assert client.lifecycle(Transition.TRANSITION_ACTIVATE)
        # Active but no camera frame: a standing warning naming the topic.
        _wait_diag(client, WARN, "input_timeout: no message on /ego/wamdiff2_planner/input/"
                                 "image")
        client.wait_matched(client.image_pub)
        client.wait_matched(client.odometry_pub)
        frames = iter(sim_frames(6, 640, 360))

        # Odometry required and none yet: not planned; the fallback (a stop) is published.
        stamp = client.publish_frame(next(frames).rgb)
        status = client.wait_status(stamp)
        assert (status["source"], status["reason"]) == ("stop", "odometry_stale")
        assert any(t == pytest.approx(stamp, abs=1e-6) for t in
                   [p.header.stamp.sec + p.header.stamp.nanosec * 1e-9
                    for _, p in client.messages("path")])

        # Fresh odometry: the model plans (the untrained preset's answer does not parse, so
        # the reason is the parse failure, no longer the odometry).
        def planned_with_odometry(odometry_stamp: float, frame_stamp: float) -> dict:
            before = client.counter("odometry_received")
            client.publish_odometry(odometry_stamp, vx=5.0)
            _counter_rises(client, "odometry_received", before)
            client.publish_frame(next(frames).rgb, frame_stamp)
            return client.wait_status(frame_stamp)

        now = client.now()
        assert planned_with_odometry(now, now + 0.1)["reason"] == "parse_failures"

        # Time restarts (a bag loop, a simulator reset): odometry 100 s older is a new start,
        # counted, and plans go on with it.
        resets = client.counter("odometry_reset")
        old = now - 100.0
        assert planned_with_odometry(old, old + 0.1)["reason"] == "parse_failures"
        assert client.counter("odometry_reset") == resets + 1

        # Cleanup forgets the odometry: a stamp just older than the last is accepted after it.
        last = client.now()
        before = client.counter("odometry_received")
        client.publish_odometry(last, vx=5.0)
        _counter_rises(client, "odometry_received", before)
        for transition in (Transition.TRANSITION_DEACTIVATE, Transition.TRANSITION_CLEANUP,
                           Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            assert client.lifecycle(transition), transition
        client.wait_matched(client.odometry_pub)
        out_of_order = client.counter("odometry_out_of_order")
        assert planned_with_odometry(last - 0.5, last - 0.4)["reason"] == "parse_failures"
        assert client.counter("odometry_out_of_order") == out_of_order

        # The shutdown transition ends the process, cleanly.
        assert client.lifecycle(Transition.TRANSITION_ACTIVE_SHUTDOWN)
        assert node.proc.wait(60) == 0, node.output()
        assert "Traceback" not in node.output(), node.output()
        values = diag_values(client.messages("diagnostics")[-1][1])
        assert values["fallback_stop"] and int(values["parse_failures"]) >= 3
    finally:
        client.close()
        node.stop()


def test_diagnostics_keep_coming_on_sim_time_before_any_clock(ros_domain, tmp_path):
    """use_sim_time with no /clock yet: the summary still comes every diagnostics_period_s
    (its timer runs on the steady clock), saying the node is unconfigured."""
    node = NodeProcess(ros_domain, tmp_path, dict(FAST_TINY, autostart=False,
                                                  use_sim_time=True))
    client = RosClient(ros_domain)
    try:
        client.wait_for(lambda: len([m for _, m in client.messages("diagnostics")
                                     if diag_values(m).get("state") == "unconfigured"]) >= 3,
                        120, "three periodic summaries")
        assert node.alive(), node.output()
    finally:
        client.close()
        node.stop()
