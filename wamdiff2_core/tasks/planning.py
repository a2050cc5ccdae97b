"""Planning task: the reference repository's prompt and the 8-waypoint answer.

Prompt (the user turn of the reference WAM-Diff2 data, reproduced byte for byte)::

    Here is a front-view images from a driving vehicle: <image>
    The navigation information is: right
    The current position is (0.00,0.00)
    The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)
    Instruction: Based on the visual motion cues from the image (...) predict the optimal
    driving action for the next 4 seconds with 8 new waypoints.

Answer: ``x1,y1,x2,y2,...,x8,y8``: metres in the ego frame at the current time (x forward,
y left), waypoint k at t = 0.5 k s, every number with exactly two decimals, e.g.
``2.26,-0.17,4.43,-0.70,6.52,-1.55,8.48,-2.64,10.28,-3.88,11.99,-5.25,13.76,-6.83,15.59,-8.59``.
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Any, Sequence

import numpy as np

from .cameras import (DEFAULT_CAMERAS, SCENE_PATTERN, SCENE_PREFIX, read_scene,
                      scene_prefix)
from .errors import AnswerParseError, as_text

TASK = "planning"
PROMPT_TASK = "planning_prompt"

COMMANDS: tuple[str, ...] = ("left", "right", "straight")
NUM_WAYPOINTS = 8
WAYPOINT_DT_S = 0.5
NUM_NUMBERS = 2 * NUM_WAYPOINTS
MAX_ABS_WAYPOINT_M = 1000.0

# After the scene opening shared by every task's prompt (``cameras.scene_prefix``: the
# reference's text for the front camera alone), so the prompt up to and including the images
# is identical across tasks.
_PLANNING_BODY = (
    "The navigation information is: {command}\n"
    "The current position is ({px},{py})\n"
    "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\n"
    "Instruction: Based on the visual motion cues from the image (such as the relative speed "
    "of other vehicles and the changing distance to the intersection) and the provided "
    "telemetry, predict the optimal driving action for the next 4 seconds with 8 new "
    "waypoints."
)

# One number of an answer: an optional minus, an integer part without leading zeros (at most
# four digits: |value| <= 1000 is checked afterwards), a point and EXACTLY two decimals. ASCII
# digits only ([0-9], not \d, which also matches e.g. Arabic-Indic digits that float() takes).
_WAYPOINT_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,3})\.[0-9]{2}")
# A number in a prompt: same shape, no limit on the integer part.
_PROMPT_NUMBER = r"-?(?:0|[1-9][0-9]*)\.[0-9]{2}"


def _fmt2(value: float) -> str:
    """*value* with two decimals, never "-0.00" (negative values that round to zero included)."""
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text


def _pair(name: str, value: Any) -> tuple[float, float]:
    message = f"{name} must be two finite real numbers (x, y), got {value!r}"
    try:
        arr = np.asarray(value, dtype=object)
    except (TypeError, ValueError) as exc:
        raise ValueError(message) from exc
    if arr.ndim != 1 or arr.shape[0] != 2:
        raise ValueError(message)
    items = list(arr)
    if not all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
               for v in items):
        raise ValueError(message)
    floats = (float(items[0]), float(items[1]))
    if not all(math.isfinite(v) for v in floats):
        raise ValueError(message)
    return floats


def planning_prompt(command: str, velocity: Sequence[float] = (0.0, 0.0),
                    acceleration: Sequence[float] = (0.0, 0.0),
                    position: Sequence[float] = (0.0, 0.0),
                    cameras: Sequence[str] = DEFAULT_CAMERAS) -> str:
    """The planning user turn: for the front camera alone, the reference repository's,
    byte for byte.

    Args:
        command: navigation command, one of :data:`COMMANDS`.
        velocity: (vx, vy) in m/s, ego frame (x forward, y left).
        acceleration: (ax, ay) in m/s^2, ego frame.
        position: (x, y) in metres; the reference data always uses (0.00, 0.00).
        cameras: the names of the cameras whose images the prompt holds, in order
            (``cameras.scene_prefix``).

    Numbers are written with two decimals, and a value that rounds to zero as "0.00" (never
    "-0.00"). The prompt contains one "<image>" placeholder per camera.

    Raises:
        ValueError: unknown command, a vector that is not two finite numbers, or a bad
            camera list.
    """
    if not isinstance(command, str) or command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    px, py = _pair("position", position)
    vx, vy = _pair("velocity", velocity)
    ax, ay = _pair("acceleration", acceleration)
    return scene_prefix(cameras) + _PLANNING_BODY.format(
        command=str(command), px=_fmt2(px), py=_fmt2(py), vx=_fmt2(vx), vy=_fmt2(vy),
        ax=_fmt2(ax), ay=_fmt2(ay))


def _build_prompt_regex() -> re.Pattern[str]:
    fields = {"command": "(?P<command>" + "|".join(COMMANDS) + ")"}
    for key in ("px", "py", "vx", "vy", "ax", "ay"):
        fields[key] = f"(?P<{key}>{_PROMPT_NUMBER})"
    # Escape the literal text, keep the {field} slots, then fill them with the groups.
    parts = re.split(r"(\{[a-z]+\})", _PLANNING_BODY)
    pattern = "".join(fields[p[1:-1]] if p.startswith("{") and p.endswith("}") else re.escape(p)
                      for p in parts)
    return re.compile(SCENE_PATTERN + pattern)


_PROMPT_REGEX = _build_prompt_regex()


def parse_planning_prompt(text: str) -> dict:
    """Read back a prompt made by :func:`planning_prompt` (or a reference-data user turn).

    Returns ``{"command": str, "position": (x, y), "velocity": (vx, vy),
    "acceleration": (ax, ay), "cameras": (name, ...)}`` with float tuples, so that
    ``planning_prompt(**parse_planning_prompt(p)) == p`` for every prompt ``p`` that
    :func:`planning_prompt` makes.

    Strict: the text must be the template exactly (no extra or missing whitespace, numbers
    with exactly two decimals). "-0.00", which the reference data may contain, is accepted and
    read as 0.0.

    Raises:
        AnswerParseError: (task "planning_prompt") for anything else, non-str inputs included.
    """
    text = as_text(PROMPT_TASK, text)
    match = _PROMPT_REGEX.fullmatch(text)
    cameras = read_scene(match) if match else None
    if cameras is None:
        raise AnswerParseError(PROMPT_TASK, text, _prompt_mismatch_reason(text))
    num = {k: float(match.group(k)) + 0.0 for k in ("px", "py", "vx", "vy", "ax", "ay")}
    return {
        "command": match.group("command"),
        "position": (num["px"], num["py"]),
        "velocity": (num["vx"], num["vy"]),
        "acceleration": (num["ax"], num["ay"]),
        "cameras": cameras,
    }


def _prompt_mismatch_reason(text: str) -> str:
    # Point at the first line that differs from the template, for a useful message.
    scene = re.match(SCENE_PATTERN, text)
    if scene is None or read_scene(scene) is None:
        return ("not the planning prompt template: it must open with the scene text "
                f"{SCENE_PREFIX!r} or one named line per camera")
    expected = _PLANNING_BODY.split("\n")
    got = text[scene.end():].split("\n")
    if len(got) != len(expected):
        return (f"not the planning prompt template: expected {len(expected)} lines, "
                f"got {len(got)}")
    for i, (want, have) in enumerate(zip(expected, got)):
        stem = want.split("{", 1)[0]
        if not have.startswith(stem):
            return (f"not the planning prompt template: line {i + 1} after the scene opening "
                    f"should start with {stem!r}")
    return "not the planning prompt template (bad command or a number not written as -?D.DD)"


def format_waypoints(wp: Any) -> str:
    """The planning answer for waypoints *wp* (shape (8, 2), metres, x forward, y left).

    Every number is written with exactly two decimals (rounded to nearest), a value that
    rounds to zero as "0.00" (never "-0.00"), comma-separated without spaces.

    Raises:
        ValueError: wrong shape, a non-finite value, or |value| > 1000 m (which
            :func:`parse_waypoints` would refuse).
    """
    try:
        arr = np.asarray(wp, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"waypoints must be a ({NUM_WAYPOINTS}, 2) array of numbers") from exc
    if arr.shape != (NUM_WAYPOINTS, 2):
        raise ValueError(f"waypoints must have shape ({NUM_WAYPOINTS}, 2), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("waypoints must be finite")
    if np.any(np.abs(arr) > MAX_ABS_WAYPOINT_M):
        raise ValueError(f"waypoints must be within +-{MAX_ABS_WAYPOINT_M:g} m")
    return ",".join(_fmt2(float(v)) for v in arr.reshape(-1))


def parse_waypoints(text: str) -> np.ndarray:
    """Parse a planning answer into an (8, 2) float64 array (metres, x forward, y left).

    Grammar (strict): after stripping surrounding whitespace, exactly 16 numbers separated
    by commas, each comma optionally followed by spaces (no other spacing). A number is an
    optional "-", an integer part in ASCII digits without leading zeros, ".", and exactly two
    decimals (``-?(0|[1-9][0-9]*)\\.[0-9]{2}``), with |value| <= 1000 m. No "+", exponents,
    "nan"/"inf", brackets, labels or other text. "-0.00" is read as 0.0.

    Truncation: because every number must carry exactly two decimals, a strict prefix of an
    accepted answer is itself rejected, including a cut inside the final number ("...,15.5"
    or "...,15." or "...,15" of "...,15.59"): no prefix of a number with two decimals has two
    decimals. The only prefixes that parse are those that cut trailing whitespace away, and
    they give the same values. A cut that drops whole numbers also fails the count check.

    Raises:
        AnswerParseError: (task "planning") for any malformed text, and for non-str inputs
            (None, bytes, numbers ...); never any other exception type.
    """
    raw = as_text(TASK, text)
    body = raw.strip()
    if not body:
        raise AnswerParseError(TASK, raw, "empty answer")
    parts = body.split(",")
    if len(parts) != NUM_NUMBERS:
        raise AnswerParseError(
            TASK, raw, f"expected {NUM_NUMBERS} comma-separated numbers, got {len(parts)}")
    values = []
    for i, part in enumerate(parts):
        token = part.lstrip(" ") if i else part
        if _WAYPOINT_NUMBER.fullmatch(token) is None:
            raise AnswerParseError(
                TASK, raw, f"item {i + 1} {token[:40]!r} is not a number written as -?D.DD "
                           f"(at most {int(MAX_ABS_WAYPOINT_M)} m)")
        value = float(token) + 0.0   # + 0.0 turns -0.0 into 0.0
        if not math.isfinite(value) or abs(value) > MAX_ABS_WAYPOINT_M:
            raise AnswerParseError(
                TASK, raw, f"item {i + 1} {token!r} exceeds +-{MAX_ABS_WAYPOINT_M:g} m")
        values.append(value)
    return np.asarray(values, dtype=np.float64).reshape(NUM_WAYPOINTS, 2)
