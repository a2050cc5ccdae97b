"""The node's parameters: one table, declared with descriptors, validated into NodeConfig.

This is the one place where ROS parameters meet the core's configuration: every
`decode.*` parameter maps one-to-one onto a field of `wamdiff2_core.decoding.DecodeConfig`
(`0` and `""` stand for the field's `None`, "not chosen"; `decode.constrained` true for
True: every answer in its task's language, free-text answers non-blank); the
`plan_decode.*` parameters override three of those fields for planning answers only (each
has an "as `decode.*`" value, its default); and `node_config` turns a full set of parameter
values into a frozen `NodeConfig` or raises ValueError naming the parameter and the reason.
The `decode` group becomes one `wamdiff2_core.planner_config.PlannerConfig`
(`NodeConfig.planner_config`), the object a YAML file or the command line also builds.

Each parameter belongs to a group saying what a change at run time needs:
``load`` (a new model: only while the node is unconfigured), ``io`` (new subscriptions or
timers: only while unconfigured), ``decode`` (the `decode.*` and `plan_decode.*` values and
`backend`: a new planner sharing the weights, warmed up, then swapped in whole or not at
all), ``live`` (applies to the next frame).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

from wamdiff2_core.candidates import (DIVERSITY, MAX_K, SCORER_NAMES, CandidateConfig,
                                      CandidateConfigError)
from wamdiff2_core.candidates.config import (DEFAULT_DIVERSITY, DEFAULT_SCORER,
                                             DEFAULT_TEMPERATURE, MAX_TEMPERATURE)
from wamdiff2_core.decoding import COMMIT_RULES, DecodeConfig
from wamdiff2_core.decoding.config import BACKENDS, DECODE_MODES, DEFAULT_BACKEND
from wamdiff2_core.planner_config import PlannerConfig
from wamdiff2_core.tasks import COMMANDS, MAX_ACCEL_MPS2, MAX_SPEED_MPS, check_cameras

TASKS = ("planning", "detection", "qa")
IMAGE_TRANSPORTS = ("raw", "compressed")
INPUT_QOS = ("best_effort", "reliable")      # odometry_qos (qos.py)
CAMERA_QOS = ("auto", *INPUT_QOS)            # camera_qos (qos.py)
FALLBACKS = ("last_plan", "stop")
DTYPES = ("", "float32", "bfloat16", "float16")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|mps)$")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: name, default (which fixes its ROS type), meaning and limits."""

    name: str
    default: Any
    description: str
    group: str                                   # load | io | decode | live
    int_range: tuple[int, int] | None = None
    float_range: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None       # allowed values (each item, for arrays)
    field: str | None = None                     # DecodeConfig field (decode group)

    def descriptor(self) -> ParameterDescriptor:
        """The ParameterDescriptor rclpy checks types and ranges against."""
        d = ParameterDescriptor(description=self.description)
        if self.int_range is not None:
            d.integer_range = [IntegerRange(from_value=self.int_range[0],
                                            to_value=self.int_range[1], step=1)]
        if self.float_range is not None:
            d.floating_point_range = [FloatingPointRange(
                from_value=self.float_range[0], to_value=self.float_range[1], step=0.0)]
        if self.choices is not None:
            d.additional_constraints = "one of: " + ", ".join(repr(c) for c in self.choices)
        return d


def _none_if_zero(v: int) -> int | None:
    return None if v == 0 else v


def _rule_or_none(v: str) -> str | None:
    return v or None


# DecodeConfig field -> (ROS default, description, range, ROS value -> field value)
_DECODE: dict[str, tuple[Any, str, tuple | None, Callable[[Any], Any]]] = {
    "block_size": (0, "Answer block size B (tokens decoded in parallel); 0: the "
                      "checkpoint's own", (0, 256), _none_if_zero),
    "steps_per_block": (0, "Denoising step budget per block; 0: one step per position",
                        (0, 1024), _none_if_zero),
    "threshold": (0.0, "Confidence at which the dynamic, budget, leftmost and frontier rules "
                       "commit a position (0 < threshold <= 1); 0: not chosen (the "
                       "checkpoint's, with its rule, where no rule or step budget is set "
                       "either; else 0.9)", (0.0, 1.0), _none_if_zero),
    "commit_rule": ("", "Which masked positions each denoising step commits; empty: not "
                        "chosen (the checkpoint's recommended rule and threshold where no "
                        "threshold or step budget is set either, the bundled model: "
                        "low_confidence_frontier at 0.95; else low_confidence_dynamic)", None,
                    _rule_or_none),
    "temperature": (0.0, "Sampling temperature; 0: greedy", (0.0, 10.0), float),
    "max_new_tokens": (128, "Longest answer in tokens", (1, 4096), int),
    "seed": (0, "Sampling seed (used when temperature > 0)", (0, _INT32_MAX), int),
    "constrained": (True, "Keep answers inside their task's language so that they always "
                          "parse: plans, detections, and free-text answers non-blank; "
                          "false: off", None, bool),
    "mode": ("diffusion", "How answers are decoded: diffusion (the model's own parallel "
                          "decoding) or exact (the diffusion model drafts and its verifier, "
                          "the checkpoint's AR teacher, checks: the teacher's greedy "
                          "answers)", None, str),
}

# Planning overrides: DecodeConfig field -> (ROS default meaning "as decode.*", description,
# range, ROS value -> field value)
_PLAN_DECODE: dict[str, tuple[Any, str, tuple | None, Callable[[Any], Any]]] = {
    "commit_rule": ("", "Commit rule for planning answers only; empty: decode.commit_rule "
                        "(low_confidence_leftmost with 8 steps and threshold 0.95 is the fast "
                        "planning setting, docs/decoding.md)", None, str),
    "steps_per_block": (-1, "Denoising step budget per block for planning answers only; -1: "
                            "decode.steps_per_block; 0: one step per position", (-1, 1024),
                        _none_if_zero),
    "threshold": (0.0, "Commit threshold for planning answers only; 0: decode.threshold",
                  (0.0, 1.0), float),
}


def _decode_specs(prefix: str, table: dict, rules: tuple[str, ...]) -> list[ParamSpec]:
    """The ``prefix.<field>`` parameters of a DecodeConfig field table (decode group);
    ``rules``: the values a commit_rule parameter takes."""
    specs = []
    for field, (default, description, limits, _) in table.items():
        is_int = isinstance(default, int)
        specs.append(ParamSpec(
            f"{prefix}.{field}", default, description, "decode",
            int_range=limits if is_int and limits else None,
            float_range=limits if not is_int and isinstance(default, float) else None,
            choices=rules if field == "commit_rule" else
            DECODE_MODES if field == "mode" else None, field=field))
    return specs


# Diffusion fields for a checkpoint that does not state them (`model.*`; -1 / "": the
# checkpoint's own, else the Qwen3-VL conventions for a Qwen vocabulary, docs/model.md);
# `decode.block_size` supplies the block size. Field -> ROS default meaning "unset".
_MODEL_FIELDS = (
    ParamSpec("model.paradigm", "", "How the checkpoint decodes when it does not say: ar or "
                                    "diffusion; empty: the checkpoint's own", "load",
              choices=("", "ar", "diffusion")),
    ParamSpec("model.mask_token_id", -1, "Diffusion mask token id for a checkpoint that does "
                                         "not state it; -1: the checkpoint's own", "load",
              int_range=(-1, _INT32_MAX)),
    ParamSpec("model.eoa_token_id", -1, "End-of-answer token id for a checkpoint that does "
                                        "not state it; -1: the checkpoint's own", "load",
              int_range=(-1, _INT32_MAX)),
    ParamSpec("model.pad_token_id", -1, "Prompt padding token id for a checkpoint that does "
                                        "not state it; -1: the checkpoint's own", "load",
              int_range=(-1, _INT32_MAX)),
)
_UNSET = {"model.paradigm": "", "model.mask_token_id": -1, "model.eoa_token_id": -1,
          "model.pad_token_id": -1}

PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("autostart", True, "Configure (load + warm up) and activate at start-up; "
                                 "false: wait for lifecycle transitions", "load"),
    ParamSpec("checkpoint", "", "Checkpoint directory or preset name (tiny, small, ...); "
                                "empty: the bundled default model", "load"),
    ParamSpec("device", "cpu", "torch device: cpu, cuda, cuda:N or mps", "load"),
    ParamSpec("dtype", "", "Weights dtype; empty: the checkpoint's own", "load",
              choices=DTYPES),
    *_MODEL_FIELDS,
    *_decode_specs("decode", _DECODE, ("",) + COMMIT_RULES),
    *_decode_specs("plan_decode", _PLAN_DECODE, ("",) + COMMIT_RULES),
    ParamSpec("plan_max_speed_mps", 40.0, "Speed of the planning language's kinematic "
                                          "envelope: no waypoint farther from the ego than "
                                          "this speed allows (rounded up to whole seconds); "
                                          "0: the parser's whole range (docs/decoding.md)",
              "decode", float_range=(0.0, 1000.0)),
    ParamSpec("candidates.k", 1, "Candidate plans per frame, decoded in one batch; the "
                                 "scorer's choice is the Path (~/output/candidates: all of "
                                 "them with their scores); 1: one plan, no scorer",
              "decode", int_range=(1, MAX_K)),
    ParamSpec("candidates.scorer", DEFAULT_SCORER, "Who chooses among the candidates, with "
                                                   "run-time information only: confidence, "
                                                   "consensus, rules or learned (the "
                                                   "checkpoint's candidate_scorer.json or "
                                                   "candidates.scorer_weights)", "decode",
              choices=SCORER_NAMES),
    ParamSpec("candidates.scorer_weights", "", "The learned scorer's weights file; empty: "
                                               "the checkpoint's candidate_scorer.json",
              "decode"),
    ParamSpec("candidates.diversity", DEFAULT_DIVERSITY, "How candidates differ from the "
                                                         "greedy plan: sample (at "
                                                         "candidates.temperature) or commands "
                                                         "(the other commands' greedy plans "
                                                         "first)", "decode", choices=DIVERSITY),
    ParamSpec("candidates.temperature", DEFAULT_TEMPERATURE, "Sampling temperature of the "
                                                             "sampled candidates", "decode",
              float_range=(0.01, MAX_TEMPERATURE)),
    ParamSpec("backend", DEFAULT_BACKEND, "Decoder backend (wamdiff2_core.decoding.engine): "
                                 "fast (static KV cache; CUDA graphs on a GPU) or reference "
                                 "(eager, the ground truth); same tokens", "decode",
              choices=BACKENDS),
    ParamSpec("tasks", ["planning", "qa"], "Tasks the node runs: planning (Path + markers "
                                           "per frame), detection (per planned frame), qa "
                                           "(answers on ~/input/question)", "live",
              choices=TASKS),
    ParamSpec("default_command", "straight", "Navigation command until one arrives on "
                                             "~/input/command, and after an unknown one",
              "live", choices=COMMANDS),
    ParamSpec("image_transport", "raw", "raw: sensor_msgs/Image on ~/input/image; "
                                        "compressed: CompressedImage on "
                                        "~/input/image/compressed", "io",
              choices=IMAGE_TRANSPORTS),
    ParamSpec("cameras", ["front"], "Camera names, the model's cameras in its order (checked "
                                    "at configure); the first one triggers planning. With "
                                    "several, topics are ~/input/<name>/image", "io"),
    ParamSpec("camera_sync_tolerance_s", 0.1, "With several cameras, each other camera's image "
                                              "is its one nearest the trigger image's stamp, "
                                              "if within this; else the frame gets the "
                                              "fallback (camera_late, or camera_missing when "
                                              "the camera has been silent input_timeout_s)",
              "live", float_range=(0.001, 10.0)),
    ParamSpec("camera_sync_wait_s", 0.1, "With several cameras, how long a trigger image "
                                         "waits after its arrival for the other cameras' "
                                         "images near its stamp; it plans as soon as all are "
                                         "there, else gets the fallback (camera_late or "
                                         "camera_missing) when this has passed", "live",
              float_range=(0.0, 10.0)),
    ParamSpec("camera_qos", "auto", "Camera subscription QoS, keep last 1. auto: reliable "
                                    "where every publisher of the topic offers reliable and "
                                    "the DDS setting is not the package's profile, else best "
                                    "effort (re-checked as publishers come and go); "
                                    "best_effort: connects to any driver; reliable", "io",
              choices=CAMERA_QOS),
    ParamSpec("odometry_qos", "best_effort", "best_effort | reliable, as camera_qos (keep "
                                             "last 10)", "io", choices=INPUT_QOS),
    ParamSpec("max_planning_rate_hz", 0.0, "Plan at most this often; 0: as fast as the "
                                           "model allows", "live", float_range=(0.0, 100.0)),
    ParamSpec("max_input_age_s", 1.0, "Drop frames older than this (node clock minus image "
                                      "stamp) when planning starts; 0: never", "live",
              float_range=(0.0, 3600.0)),
    ParamSpec("plan_timeout_s", 3.0, "A frame not planned this long after its image "
                                     "arrived gets the fallback at once (counted as "
                                     "plan_timeouts) and its decode is cancelled within one "
                                     "forward pass; 0: wait for the plan", "live",
              float_range=(0.0, 600.0)),
    ParamSpec("max_path_gap_s", 5.0, "Watchdog: when no Path has gone out for this long "
                                     "while frames arrive, a fallback Path goes out and "
                                     "/diagnostics turns ERROR naming the cause "
                                     "(path_gaps); 0: no watchdog", "live",
              float_range=(0.0, 3600.0)),
    ParamSpec("question_timeout_s", 5.0, "A question not begun this long after it arrived "
                                         "is refused with an empty answer "
                                         "(question_timeout); questions run only while no "
                                         "frame waits and the answer is expected to end "
                                         "before the next frame", "live",
              float_range=(0.01, 3600.0)),
    ParamSpec("max_future_s", 0.5, "Drop frames and odometry stamped more than this ahead of "
                                   "the node clock (counted); 0: no check", "live",
              float_range=(0.0, 3600.0)),
    ParamSpec("max_odometry_age_s", 0.5, "Plan only with odometry at most this much older "
                                         "than the frame; otherwise the fallback is published "
                                         "(reason odometry_stale). 0: odometry not required "
                                         "(the latest is used, zeros before the first)",
              "live", float_range=(0.0, 3600.0)),
    ParamSpec("max_speed_mps", MAX_SPEED_MPS, "Odometry with a faster speed is implausible: "
                                              "dropped and counted", "live",
              float_range=(0.1, 1000.0)),
    ParamSpec("max_accel_mps2", MAX_ACCEL_MPS2, "Odometry implying a larger acceleration is "
                                                "implausible: dropped and counted", "live",
              float_range=(0.1, 10000.0)),
    ParamSpec("input_timeout_s", 2.0, "/diagnostics warns when the camera or the odometry has "
                                      "been silent this long while active; 0: never", "live",
              float_range=(0.0, 3600.0)),
    ParamSpec("input_timeout_error_s", 10.0, "The warning of a silent camera or odometry "
                                             "becomes an error past this long; 0: never",
              "live", float_range=(0.0, 3600.0)),
    ParamSpec("fallback", "last_plan", "When a planned frame has no valid plan (model error, "
                                       "timeout, unparsed answer, stale odometry): last_plan "
                                       "(the last valid plan re-timed to the frame while it "
                                       "is younger than fallback_max_age_s, else stop) or "
                                       "stop (a braking trajectory)", "live",
              choices=FALLBACKS),
    ParamSpec("fallback_max_age_s", 1.0, "Oldest last plan the last_plan fallback re-times",
              "live", float_range=(0.0, 4.0)),
    ParamSpec("stop_decel_mps2", 3.0, "Deceleration of the stop trajectory", "live",
              float_range=(0.1, 20.0)),
    ParamSpec("max_question_chars", 2000, "Longer questions are refused (counted, an empty "
                                          "answer)", "live", int_range=(1, 1_000_000)),
    ParamSpec("max_question_tokens", 256, "Questions of more tokens are refused; the whole "
                                          "prompt must also fit the model's positions",
              "live", int_range=(1, 1_000_000)),
    ParamSpec("max_command_chars", 32, "Longer commands are refused (counted; the default "
                                       "command applies)", "live", int_range=(1, 1_000_000)),
    ParamSpec("max_image_pixels", 4096 * 4096, "Images with more pixels (width x height, "
                                               "read before decoding) are refused", "live",
              int_range=(1, _INT32_MAX)),
    ParamSpec("max_echo_chars", 80, "At most this many characters of any input are quoted "
                                    "in logs and /diagnostics", "live",
              int_range=(8, 100_000)),
    ParamSpec("log_throttle_s", 5.0, "Repeated warnings of one kind are logged at most this "
                                     "often (with a count of those left out)", "live",
              float_range=(0.0, 3600.0)),
    ParamSpec("output_frame", "base_link", "Frame of ego-frame outputs (Path, markers)",
              "live"),
    ParamSpec("path_in_odom", False, "Publish the Path in the odometry's frame (e.g. odom), "
                                     "placed with the odometry pose at the image stamp",
              "live"),
    ParamSpec("diagnostics_period_s", 1.0, "Period of the /diagnostics summary", "live",
              float_range=(0.1, 60.0)),
)
SPECS: dict[str, ParamSpec] = {p.name: p for p in PARAMS}


@dataclass(frozen=True)
class NodeConfig:
    """Validated values of every parameter; `planner_config` is ready for the planner."""

    autostart: bool
    checkpoint: str | None          # None: the bundled model
    device: str
    dtype: str | None
    fields: dict[str, Any]          # diffusion fields given by `model.*` / decode.block_size
    planner_config: PlannerConfig   # the `decode` group: decode.*, plan_decode.*, backend,
                                    # plan_max_speed_mps, candidates.*
    tasks: frozenset[str]
    default_command: str
    image_transport: str
    cameras: tuple[str, ...]
    camera_sync_tolerance_s: float
    camera_sync_wait_s: float
    camera_qos: str
    odometry_qos: str
    max_planning_rate_hz: float
    max_input_age_s: float
    plan_timeout_s: float
    max_path_gap_s: float
    question_timeout_s: float
    max_future_s: float
    max_odometry_age_s: float
    max_speed_mps: float
    max_accel_mps2: float
    input_timeout_s: float
    input_timeout_error_s: float
    fallback: str
    fallback_max_age_s: float
    stop_decel_mps2: float
    max_question_chars: int
    max_question_tokens: int
    max_command_chars: int
    max_image_pixels: int
    max_echo_chars: int
    log_throttle_s: float
    output_frame: str
    path_in_odom: bool
    diagnostics_period_s: float


_FLOATS = ("camera_sync_tolerance_s", "camera_sync_wait_s", "max_planning_rate_hz",
           "max_input_age_s", "plan_timeout_s", "max_path_gap_s", "question_timeout_s",
           "max_future_s", "max_odometry_age_s", "max_speed_mps",
           "max_accel_mps2", "input_timeout_s", "input_timeout_error_s", "fallback_max_age_s",
           "stop_decel_mps2", "log_throttle_s")
_INTS = ("max_question_chars", "max_question_tokens", "max_command_chars", "max_image_pixels",
         "max_echo_chars")


def _check_choices(spec: ParamSpec, value: Any) -> None:
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if spec.choices is not None and item not in spec.choices:
            raise ValueError(f"{spec.name}: {item!r} is not one of "
                             f"{', '.join(repr(c) for c in spec.choices)}")


def decode_config(values: Mapping[str, Any]) -> DecodeConfig:
    """The DecodeConfig the `decode.*` values describe; ValueError naming a bad one."""
    kwargs = {field: to_field(values[f"decode.{field}"])
              for field, (_, _, _, to_field) in _DECODE.items()}
    try:
        return DecodeConfig(**kwargs)
    except ValueError as exc:
        raise ValueError(f"decode.{exc}") from None


def plan_decode_config(values: Mapping[str, Any], decode: DecodeConfig
                       ) -> DecodeConfig | None:
    """``decode`` with the `plan_decode.*` overrides that are set; None when none is."""
    overrides = {field: to_field(values[f"plan_decode.{field}"])
                 for field, (unset, _, _, to_field) in _PLAN_DECODE.items()
                 if values[f"plan_decode.{field}"] != unset}
    if not overrides:
        return None
    try:
        return replace(decode, **overrides)
    except ValueError as exc:
        raise ValueError(f"plan_decode.{exc}") from None


def candidate_config(values: Mapping[str, Any]) -> CandidateConfig:
    """The CandidateConfig the `candidates.*` values describe; ValueError naming the
    parameter."""
    fields = {"k": int(values["candidates.k"]), "scorer": values["candidates.scorer"],
              "diversity": values["candidates.diversity"],
              "temperature": float(values["candidates.temperature"])}
    for field, value in fields.items():          # each alone: the message names its parameter
        try:
            CandidateConfig(**{field: value})
        except CandidateConfigError as exc:
            raise ValueError(f"candidates.{field}: {exc}") from None
    return CandidateConfig(**fields)


def planner_config(values: Mapping[str, Any]) -> PlannerConfig:
    """The PlannerConfig the `decode` group's values describe (built once per parameter
    set; a change of it is ``Planner.reconfigure``'s); ValueError naming the parameter."""
    decode = decode_config(values)
    candidates = candidate_config(values)
    try:
        return PlannerConfig(decode, plan_decode_config(values, decode),
                             backend=values["backend"], candidates=candidates,
                             scorer_weights=values["candidates.scorer_weights"] or None,
                             plan_max_speed=float(values["plan_max_speed_mps"]) or None)
    except ValueError as exc:             # e.g. candidates with exact-mode planning answers
        raise ValueError(f"candidates.k: {exc}") from None


def model_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The diffusion fields the `model.*` parameters (and a non-zero `decode.block_size`) give
    the planner's loading (``Planner.from_pretrained(fields=...)``)."""
    out = {name.split(".", 1)[1]: values[name] for name, unset in _UNSET.items()
           if values[name] != unset}
    if values["decode.block_size"]:
        out["block_size"] = values["decode.block_size"]
    return out


def decode_values(decode: DecodeConfig) -> dict[str, Any]:
    """The `decode.*` parameter values that describe `decode` (the inverse of decode_config;
    `constrained=None`, which no parameter gives, reads as true)."""
    values = {field: getattr(decode, field) for field in _DECODE}
    return {f"decode.{field}": (value is not False if field == "constrained" else
                                _DECODE[field][0] if value is None else value)
            for field, value in values.items()}


def node_config(values: Mapping[str, Any]) -> NodeConfig:
    """A NodeConfig from parameter name -> value (every name in PARAMS); ValueError if invalid.

    The message of the ValueError starts with the parameter's name and says what is wrong.
    """
    for spec in PARAMS:
        _check_choices(spec, values[spec.name])
    device = values["device"]
    if not _DEVICE.match(device):
        raise ValueError(f"device: {device!r} is not cpu, cuda, cuda:N or mps")
    tasks = list(values["tasks"])
    if not tasks or len(set(tasks)) != len(tasks):
        raise ValueError(f"tasks: needs at least one task and no repeats, got {tasks}")
    cameras = check_cameras(list(values["cameras"]), "cameras")   # also topic name tokens
    if not values["output_frame"].strip():
        raise ValueError("output_frame: must not be empty")
    return NodeConfig(
        autostart=bool(values["autostart"]),
        checkpoint=values["checkpoint"] or None,
        device=device,
        dtype=values["dtype"] or None,
        fields=model_fields(values),
        planner_config=planner_config(values),
        tasks=frozenset(tasks),
        default_command=values["default_command"],
        image_transport=values["image_transport"],
        cameras=cameras,
        camera_qos=values["camera_qos"],
        odometry_qos=values["odometry_qos"],
        **{name: float(values[name]) for name in _FLOATS},
        **{name: int(values[name]) for name in _INTS},
        fallback=values["fallback"],
        output_frame=values["output_frame"].strip(),
        path_in_odom=bool(values["path_in_odom"]),
        diagnostics_period_s=float(values["diagnostics_period_s"]),
    )


def declare(node) -> dict[str, Any]:
    """Declare every parameter on `node` (overrides from --params-file win); the values.

    Raises rclpy's InvalidParameterValueException / InvalidParameterTypeException when an
    override is out of range or of the wrong type (the message names the parameter).
    """
    declared = node.declare_parameters("", [(p.name, p.default, p.descriptor())
                                            for p in PARAMS])
    return {p.name: p.value for p in declared}


def groups_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, list[str]]:
    """Group -> names of the parameters whose value differs between `old` and `new`."""
    out: dict[str, list[str]] = {}
    for spec in PARAMS:
        if list_or_value(old[spec.name]) != list_or_value(new[spec.name]):
            out.setdefault(spec.group, []).append(spec.name)
    return out


def list_or_value(value: Any) -> Any:
    """Array parameters arrive as lists or array.arrays; compare them as lists."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return list(value)
    return value
