"""A checkpoint with a NaN weight fails the real node's configure (issue 45): the transition
returns FAILURE, the reason names the tensor and the node stays unconfigured;
the same node then configures with the bundled model."""
from __future__ import annotations

import threading

import pytest
import rclpy
from rclpy.context import Context
from rclpy.lifecycle import TransitionCallbackReturn
from poisoned_weights import poisoned_copy
from rclpy.parameter import Parameter

pytestmark = pytest.mark.ros
TENSOR = "model.language_model.layers.1.self_attn.q_proj.weight"


def test_nan_weights_fail_configure_naming_the_tensor(tmp_path, ros_domain):
    from wamdiff2_ros.node.planner_node import PlannerNode

    bad = poisoned_copy(tmp_path / "poisoned", {TENSOR: float("nan")})

    ctx = Context()
    rclpy.init(context=ctx, domain_id=ros_domain)
    node = PlannerNode(context=ctx, parameter_overrides=[
        Parameter("checkpoint", value=str(bad)), Parameter("decode.max_new_tokens", value=8),
        Parameter("decode.steps_per_block", value=2),
        Parameter("decode.constrained", value=False)])
    out = {}

    def run():                 # off the main thread, as the executor runs it
        out["bad"] = node.trigger_configure()
        out["error"] = node.stats.configure_error
        out["state"] = node.stats.state
        out["set"] = node.set_parameters([Parameter("checkpoint", value="")])[0].successful
        out["good"] = node.trigger_configure()

    try:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(timeout=300)
    finally:
        node.close()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    assert out["bad"] == TransitionCallbackReturn.FAILURE
    assert out["error"] == (f"CheckpointError: checkpoint {bad} holds non-finite weights (NaN "
                            f"or infinity) in 1 tensor(s): {TENSOR}")
    assert out["state"] == "unconfigured"
    assert out["set"] and out["good"] == TransitionCallbackReturn.SUCCESS
