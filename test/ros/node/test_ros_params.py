"""Parameters: one table mapped onto DecodeConfig, the params file, rejection with reasons,
and changes that apply whole or not at all (a real node in this process)."""
from __future__ import annotations

import dataclasses
import threading

import pytest
import rclpy
import yaml
from rclpy.context import Context
from rclpy.exceptions import InvalidParameterValueException
from rclpy.parameter import Parameter
from ros_harness import FAST_TINY, PARAMS_FILE

from wamdiff2_core.decoding import DecodeConfig
from wamdiff2_core.decoding.config import resolve_decode
from wamdiff2_core.tasks.languages import planning_language
from wamdiff2_ros.node import params
from wamdiff2_ros.node.planner_node import PlannerNode, main


def _defaults() -> dict:
    return {p.name: p.default for p in params.PARAMS}


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_decode_parameters_map_one_to_one_onto_decode_config():
    fields = {f.name for f in dataclasses.fields(DecodeConfig)}
    decode_specs = [p for p in params.PARAMS if p.name.startswith("decode.")]
    assert {p.field for p in decode_specs} == fields
    assert all(p.name == f"decode.{p.field}" for p in decode_specs)
    # constrained: true is True, which also keeps free-text answers non-blank (issue 46)
    assert params.node_config(_defaults()).planner_config.decode == \
        DecodeConfig(constrained=True)


def test_plan_decode_overrides_only_what_is_set():
    assert params.node_config(_defaults()).planner_config.plan_decode is None          # all "as decode.*"
    values = dict(_defaults(), **{"decode.threshold": 0.8,
                                  "plan_decode.commit_rule": "low_confidence_leftmost",
                                  "plan_decode.steps_per_block": 8})
    cfg = params.node_config(values).planner_config
    assert cfg.decode == DecodeConfig(threshold=0.8, constrained=True)
    assert cfg.plan_decode == DecodeConfig(threshold=0.8, commit_rule="low_confidence_leftmost",
                                           steps_per_block=8, constrained=True)
    values["plan_decode.threshold"] = 0.95
    values["plan_decode.steps_per_block"] = 0                        # one per position
    assert params.node_config(values).planner_config.plan_decode == DecodeConfig(
        threshold=0.95, commit_rule="low_confidence_leftmost", constrained=True)


def test_the_plan_envelope_speed_parameter():
    def speed(**values):
        return params.node_config(dict(_defaults(), **values)).planner_config.plan_max_speed

    assert speed() == 40.0
    assert speed(plan_max_speed_mps=60.0) == 60.0
    assert speed(plan_max_speed_mps=0.0) is None


def test_params_file_declares_exactly_the_node_parameters_with_their_defaults():
    tree = yaml.safe_load(PARAMS_FILE.read_text())
    values = _flatten(tree["/**"]["ros__parameters"])         # any namespace, any name
    assert values == _defaults()


def test_every_parameter_has_a_description_and_numbers_have_ranges():
    for spec in params.PARAMS:
        d = spec.descriptor()
        assert d.description, spec.name
        if isinstance(spec.default, (int, float)) and not isinstance(spec.default, bool):
            assert d.integer_range or d.floating_point_range, spec.name


@pytest.mark.parametrize("name,value,reason", [
    ("device", "gpu", "device"),
    ("dtype", "int8", "dtype"),
    ("tasks", [], "tasks"),
    ("tasks", ["planning", "flying"], "flying"),
    ("tasks", ["qa", "qa"], "repeats"),
    ("cameras", ["front", "front left"], "front left"),
    ("cameras", [], "cameras"),
    ("decode.commit_rule", "bogus", "decode.commit_rule"),
    ("decode.threshold", 1.5, "decode.threshold"),
    ("plan_decode.commit_rule", "bogus", "plan_decode.commit_rule"),
    ("plan_decode.steps_per_block", -2, "plan_decode.steps_per_block"),
    ("default_command", "reverse", "default_command"),
    ("image_transport", "theora", "image_transport"),
    ("camera_qos", "fast", "camera_qos"),
    ("odometry_qos", "best", "odometry_qos"),
    ("backend", "bogus", "backend"),
    ("fallback", "coast", "fallback"),
    ("output_frame", "  ", "output_frame"),
])
def test_invalid_values_are_rejected_with_the_parameter_and_reason(name, value, reason):
    values = dict(_defaults(), **{name: value})
    with pytest.raises(ValueError, match=reason.replace(".", r"\.")):
        params.node_config(values)


@pytest.fixture
def context(ros_domain):
    ctx = Context()
    rclpy.init(context=ctx, domain_id=ros_domain)
    yield ctx
    rclpy.try_shutdown(context=ctx)


def _node(context, **overrides) -> PlannerNode:
    return PlannerNode(context=context, parameter_overrides=[
        Parameter(k, value=v) for k, v in overrides.items()])


def test_out_of_range_override_stops_start_up_with_the_reason(context):
    with pytest.raises(InvalidParameterValueException, match="decode.threshold"):
        _node(context, **{"decode.threshold": 1.5})
    with pytest.raises(ValueError, match="decode.commit_rule"):
        _node(context, **{"decode.commit_rule": "bogus"})


def test_main_exits_2_naming_an_invalid_parameter(ros_domain, monkeypatch, capsys):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(ros_domain))
    code = main(["planner_node", "--ros-args", "-p", "max_planning_rate_hz:=-1.0"])
    assert code == 2
    assert "max_planning_rate_hz" in capsys.readouterr().err


def _off_main_thread(fn):
    """Run fn on a thread of its own, as the node's executor does.

    torch's OpenMP threads spin-wait on the main thread; on a busy 2-core machine that makes
    a tiny decode there 5-100x slower than on any other thread.
    """
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_runtime_changes_apply_whole_or_are_rejected(context):
    node = _node(context, **FAST_TINY)
    _off_main_thread(lambda: _runtime_changes(node))


def _runtime_changes(node) -> bool:
    try:
        assert node.trigger_configure() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
        planner = node._planner

        # Out of range: rclpy's descriptor check, with the reason.
        result = node.set_parameters([Parameter("decode.threshold", value=1.5)])[0]
        assert not result.successful and "decode.threshold" in result.reason

        # Atomic: one bad value rejects the whole change; nothing moved.
        result = node.set_parameters_atomically([
            Parameter("decode.threshold", value=0.5),
            Parameter("decode.commit_rule", value="bogus")])
        assert not result.successful and "commit_rule" in result.reason
        assert node.get_parameter("decode.threshold").value == 0.0
        assert node.config.planner_config.decode.threshold is None and node._planner is planner

        # A new model or new subscriptions only while unconfigured.
        for name, value in (("checkpoint", "small"), ("image_transport", "compressed")):
            result = node.set_parameters([Parameter(name, value=value)])[0]
            assert not result.successful and "unconfigured" in result.reason
            assert node.get_parameter(name).value != value

        # A decode change is accepted at once; a new planner is built and warmed off the
        # callbacks, then swapped in whole (the old one plans until then).
        result = node.set_parameters_atomically([
            Parameter("decode.block_size", value=8),
            Parameter("decode.threshold", value=0.7)])
        assert result.successful, result.reason
        assert node.wait_rebuilt(300)
        assert node._planner is not planner and node._planner.model is planner.model
        assert node._planner.decode.block_size == 8 and node._planner.decode.threshold == 0.7
        assert resolve_decode(node.config.planner_config.decode, planner.model.fields) == \
            node._planner.decode
        assert node._planner.plan_decode == node._planner.decode      # none of its own

        # Planning-only settings: a planner whose plans use them, questions the others.
        result = node.set_parameters_atomically([
            Parameter("plan_decode.commit_rule", value="low_confidence_leftmost"),
            Parameter("plan_decode.steps_per_block", value=2)])
        assert result.successful, result.reason
        assert node.wait_rebuilt(300)
        assert node._planner.plan_decode == dataclasses.replace(
            node._planner.decode, commit_rule="low_confidence_leftmost", steps_per_block=2)
        assert node._planner.decode.commit_rule == "low_confidence_dynamic"
        # ... kept across a later decode change, which they follow where not overridden
        result = node.set_parameters([Parameter("decode.threshold", value=0.6)])[0]
        assert result.successful, result.reason
        assert node.wait_rebuilt(300)
        assert node._planner.plan_decode.threshold == 0.6
        assert node._planner.plan_decode.commit_rule == "low_confidence_leftmost"

        # The plan envelope's speed: a new planner whose plans use the new language
        assert node._planner.plan_max_speed == 40.0
        result = node.set_parameters([Parameter("plan_max_speed_mps", value=60.0)])[0]
        assert result.successful, result.reason
        assert node.wait_rebuilt(300)
        assert node._planner.plan_language == planning_language(60.0)
        assert node._planner.plan_decode.commit_rule == "low_confidence_leftmost"   # kept

        # An unknown backend is rejected with the reason; the old planner stays.
        result = node.set_parameters([Parameter("backend", value="no_such_backend")])[0]
        assert not result.successful and "no_such_backend" in result.reason
        assert node.get_parameter("backend").value == "fast"
        assert node._planner.backend == "fast"

        # A planner that fails to build after the change was accepted: reported on
        # /diagnostics (rebuild_failures, ERROR) and logged; the old one stays.
        before = node._planner
        result = node.set_parameters_atomically([Parameter("candidates.scorer",
                                                           value="learned"),
                                                 Parameter("candidates.k", value=2)])
        assert result.successful, result.reason
        assert node.wait_rebuilt(300)
        assert node._planner is before
        assert node.stats.counters["rebuild_failures"] >= 1
        assert node.stats.level_and_message()[0] == b"\x02"

        # Live parameters apply to the next frame.
        assert node.set_parameters([Parameter("tasks", value=["planning", "detection"])
                                    ])[0].successful
        assert node.config.tasks == {"planning", "detection"}

        # After cleanup the model may change.
        assert node.trigger_cleanup() == rclpy.lifecycle.TransitionCallbackReturn.SUCCESS
        assert node.set_parameters([Parameter("image_transport", value="compressed")
                                    ])[0].successful
        assert node.config.image_transport == "compressed"
    finally:
        node.close()
        node.destroy_node()
    return True


def test_decode_values_inverts_decode_config():
    for decode in (DecodeConfig(constrained=True),
                   DecodeConfig(block_size=8, steps_per_block=2, threshold=0.5,
                                commit_rule="sequential", max_new_tokens=16, constrained=True),
                   DecodeConfig(constrained=False)):
        values = dict(_defaults(), **params.decode_values(decode))
        assert params.decode_config(values) == decode
    assert params.decode_values(DecodeConfig())["decode.constrained"] is True   # None: on


def test_main_exits_2_on_a_bogus_backend(ros_domain, monkeypatch, capsys):
    """docs/ros.md promises exit 2 for an invalid parameter at start-up; backend included."""
    monkeypatch.setenv("ROS_DOMAIN_ID", str(ros_domain))
    code = main(["planner_node", "--ros-args", "-p", "backend:=bogus"])
    assert code == 2
    err = capsys.readouterr().err
    assert "backend" in err and "bogus" in err and "fast" in err


@pytest.mark.parametrize("override,words", [
    ("decode.max_new_tokens:=abc", ("decode.max_new_tokens", "an integer", "'abc'")),
    ("max_speed_mps:=fast", ("max_speed_mps", "floating-point", "'fast'")),
    ("max_speed_mps:=80", ("max_speed_mps", "floating-point", "an integer")),
    ("autostart:=1", ("autostart", "a boolean")),
    ("wamdiff2_planner:tasks:=[1, 2]", ("tasks", "a list of strings")),
])
def test_main_exits_2_on_a_start_up_override_of_the_wrong_type(override, words, capsys):
    """Issue 45: rcl drops a `-p` override whose type differs from the params file's value
    and the node would start with the file's; it is refused with the parameter's name."""
    code = main(["planner_node", "--ros-args", "--params-file", str(PARAMS_FILE), "-p",
                 override])
    assert code == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err


def test_overrides_of_the_right_type_and_other_arguments_pass():
    from wamdiff2_ros.node.overrides import check_override_types, cli_overrides

    argv = ["planner_node", "-p", "x:=abc", "--ros-args", "-p", "checkpoint:=7", "--param",
            "tasks:=[planning, qa]", "-r", "__ns:=/ego", "-p", "unknown:=1", "--", "-p",
            "decode.seed:=x"]
    assert cli_overrides(argv) == [("checkpoint", "7"), ("tasks", "[planning, qa]"),
                                   ("unknown", "1")]
    check_override_types(argv)              # a number given to a string parameter is text


def test_overrides_nested_past_the_limit_are_one_sentence():
    """A `-p` value is read with the limits of every user file: nesting past the cap is
    refused naming the parameter (not a RecursionError), malformed YAML stays text."""
    from wamdiff2_ros.node.overrides import check_override_types

    deep = ["planner_node", "--ros-args", "-p", "tasks:=" + "[" * 5000]
    with pytest.raises(ValueError, match="parameter tasks"):
        check_override_types(deep)
    check_override_types(["planner_node", "--ros-args", "-p", "checkpoint:=a: b: c"])


def test_main_exits_2_on_malformed_ros_arguments(capsys):
    assert main(["planner_node", "--ros-args", "-p", "dtype:="]) == 2
    assert "dtype" in capsys.readouterr().err


def test_docs_list_every_parameter():
    docs = (PARAMS_FILE.parents[1] / "docs" / "ros.md").read_text()
    missing = [p.name for p in params.PARAMS if f"| `{p.name}` |" not in docs]
    assert not missing, f"docs/ros.md has no row for {missing}"


def test_detection_without_vision_msgs_is_a_standing_warning(context, monkeypatch):
    """Issue 15: with `detection` in `tasks` and no vision_msgs, detections are not silently
    dropped: /diagnostics carries a WARN saying so (and configure logs it)."""
    from wamdiff2_ros.node import outputs

    node = _node(context, tasks=["planning", "detection"])
    try:
        monkeypatch.setattr(outputs, "HAVE_VISION_MSGS", False)
        (warning,) = [c for c in node._conditions() if "vision_msgs" in c[1]]
        assert warning[0] == b"\x01" and "~/output/detections" in warning[1]
        monkeypatch.setattr(outputs, "HAVE_VISION_MSGS", True)
        assert not [c for c in node._conditions() if "vision_msgs" in c[1]]
    finally:
        node.destroy_node()


def test_inputs_are_subscribed_once_with_fixed_qos_and_one_timer(context):
    """The stock shape: subscriptions made at activation with fixed profiles (an explicit
    camera_qos: no QoS timer re-creating them), the diagnostics summary and the watchdog
    the timers; one
    executor thread runs every callback, so one topic's messages are handled in arrival
    order. (camera_qos auto's check runs on that thread too: test_ros_camera_qos.py.)"""
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    node = _node(context, cameras=["front", "left"], max_odometry_age_s=0.5,
                 camera_qos="best_effort")
    try:
        node._subscribe()
        subs = {(s.topic_name, s.qos_profile.reliability, s.qos_profile.durability)
                for s in node._inputs}
        assert len(node._inputs) == 6       # 2 cameras, odometry, 2 command, question
        assert ("/wamdiff2_planner/input/front/image", ReliabilityPolicy.BEST_EFFORT,
                DurabilityPolicy.VOLATILE) in subs
        assert ("/wamdiff2_planner/input/command", ReliabilityPolicy.RELIABLE,
                DurabilityPolicy.TRANSIENT_LOCAL) in subs
        assert set(node._input_topics) == {"camera0", "camera1", "odometry"}
        assert len(list(node.timers)) == 2          # diagnostics and the watchdog
    finally:
        node.destroy_node()
