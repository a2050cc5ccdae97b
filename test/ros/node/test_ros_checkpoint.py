"""The node's `checkpoint` parameter naming a directory whose config.json is `{}` (issue 17):
configure fails in under 10 s and 2 GB, counted (`configure_failed`) with the reason in the
log, the node stays up unconfigured, and the same node then configures with a good checkpoint.
Measured in a process of its own (its peak RSS is the node's)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

from wamdiff2_core.model.modeling import Wamdiff2Model

SCRIPT = textwrap.dedent("""
    import json, resource, sys, threading, time
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter
    from wamdiff2_ros.node.planner_node import PlannerNode

    bad, good = sys.argv[1], sys.argv[2]
    ctx = Context()
    rclpy.init(context=ctx)
    node = PlannerNode(context=ctx, parameter_overrides=[
        Parameter("checkpoint", value=bad), Parameter("decode.max_new_tokens", value=8),
        Parameter("decode.steps_per_block", value=2),
        Parameter("decode.constrained", value=False)])    # an 8-token plan: unconstrained
    out = {}

    def run():
        t = time.perf_counter()
        out["bad"] = int(node.trigger_configure())
        out["s"] = time.perf_counter() - t
        out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out["configure_failed"] = node.stats.counters["configure_failed"]
        out["set"] = node.set_parameters([Parameter("checkpoint", value=good)])[0].successful
        out["good"] = int(node.trigger_configure())

    thread = threading.Thread(target=run)   # off the main thread, as the executor runs it
    thread.start()
    thread.join()
    node.close()
    node.destroy_node()
    rclpy.try_shutdown(context=ctx)
    print(json.dumps(out))
""")


def test_empty_config_checkpoint_fails_configure_fast_then_a_good_one_loads(tmp_path,
                                                                            ros_domain):
    from rclpy.lifecycle import TransitionCallbackReturn

    good = tmp_path / "good"
    Wamdiff2Model.from_preset("tiny", block_size=4, seed=0).save_pretrained(good)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    (bad / "config.json").write_text("{}")
    env = dict(os.environ, ROS_DOMAIN_ID=str(ros_domain))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(bad), str(good)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["bad"] == int(TransitionCallbackReturn.FAILURE)
    assert r["s"] < 10.0 and r["rss_mb"] < 2048, r
    assert r["configure_failed"] == 1
    errors = [line for line in proc.stderr.splitlines() if "configure failed" in line]
    assert errors and "no model_type" in errors[0], proc.stderr[-3000:]
    assert r["set"] and r["good"] == int(TransitionCallbackReturn.SUCCESS), proc.stderr[-3000:]


def test_model_parameters_give_the_planner_its_field_overrides():
    from wamdiff2_ros.node import params

    values = {p.name: p.default for p in params.PARAMS}
    assert params.node_config(values).fields == {}               # all "the checkpoint's own"
    values.update({"model.mask_token_id": 151671, "model.paradigm": "diffusion",
                   "decode.block_size": 16})
    assert params.node_config(values).fields == {"mask_token_id": 151671,
                                                 "paradigm": "diffusion", "block_size": 16}
