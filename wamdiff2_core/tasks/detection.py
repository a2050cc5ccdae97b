"""Detection task: Qwen3-VL style 2D boxes on a 0-1000 grid.

Answer: a JSON list, one object per object in the image, each with exactly two keys::

    [{"bbox_2d": [x1, y1, x2, y2], "label": "car"}, ...]

The coordinates are integers on a 0-1000 grid relative to the image: ``x_grid = x_px /
width * 1000``, ``y_grid = y_px / height * 1000``. ``[]`` means "no objects". The whole list
may be wrapped in a fenced block that starts with three backticks and ``json`` and ends
with three backticks (a Qwen habit); nothing else around it is accepted.
"""
from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .cameras import DEFAULT_CAMERAS, check_cameras, scene_prefix
from .errors import AnswerParseError, as_text

TASK = "detection"
GRID = 1000
_KEYS = frozenset({"bbox_2d", "label"})

# "{where}": "the image" for the front camera alone (the bundled model's text), else the first
# camera's image, which is the one the boxes are drawn on (docs/tasks.md, "Several cameras").
_DETECTION_BODY = (
    "Instruction: Detect every vehicle, pedestrian, cyclist and obstacle in {where}. "
    'Answer with a JSON list holding one {{"bbox_2d": [x1, y1, x2, y2], "label": "<category>"}} '
    "object per detected object, where x1, y1, x2, y2 are integers on a 0-1000 grid relative "
    "to the image width and height (x to the right, y down). Answer [] if there is none."
)

# ```json <newline> BODY ``` : the body is everything in between (json.loads rejects a body
# that still holds backticks or anything else but the list and whitespace).
_FENCE = re.compile(r"```json[ \t]*\r?\n(?P<body>.*)```", re.DOTALL)


@dataclass(frozen=True)
class Detection:
    """One detected object.

    Attributes:
        box: (x1, y1, x2, y2) in pixels, x to the right, y down, x1 <= x2 and y1 <= y2.
        label: category name, a non-blank string.
        score: confidence; 1.0 for boxes read from a model's answer (the answer has none).

    Raises:
        ValueError: on construction with a box that is not four finite numbers with
            x1 <= x2 and y1 <= y2, a blank or non-str label, or a non-finite score.
    """

    box: tuple[float, float, float, float]
    label: str
    score: float = 1.0

    def __post_init__(self):
        try:
            box = tuple(float(v) for v in self.box)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"box must be four numbers (x1, y1, x2, y2), got {self.box!r}") \
                from exc
        if len(box) != 4:
            raise ValueError(f"box must be four numbers (x1, y1, x2, y2), got {self.box!r}")
        if not all(math.isfinite(v) for v in box):
            raise ValueError(f"box must be finite, got {self.box!r}")
        x1, y1, x2, y2 = box
        if x2 < x1 or y2 < y1:
            raise ValueError(f"box must have x1 <= x2 and y1 <= y2, got {self.box!r}")
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"label must be a non-blank str, got {self.label!r}")
        try:
            score = float(self.score)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"score must be a number, got {self.score!r}") from exc
        if not math.isfinite(score):
            raise ValueError(f"score must be finite, got {self.score!r}")
        object.__setattr__(self, "box", box)
        object.__setattr__(self, "label", str.__str__(self.label))
        object.__setattr__(self, "score", score)


def detection_prompt(cameras: Sequence[str] = DEFAULT_CAMERAS) -> str:
    """The detection user turn: the shared scene opening (one "<image>" per camera) and the
    instruction. The boxes of the answer are those of the first camera's image, which the
    instruction names when there are several. ValueError for a bad camera list."""
    names = check_cameras(cameras)
    where = "the image" if names == DEFAULT_CAMERAS else f"the {names[0]} camera's image"
    return scene_prefix(names) + _DETECTION_BODY.format(where=where)


def _image_size(width: Any, height: Any) -> tuple[float, float]:
    out = []
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{name} must be a positive number of pixels, got {value!r}")
        v = float(value)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive number of pixels, got {value!r}")
        out.append(v)
    return out[0], out[1]


def _to_grid(value: float, size: float) -> int:
    return round(value / size * GRID)


def format_detections(dets: Iterable[Detection], width: float, height: float) -> str:
    """The detection answer for *dets* (boxes in pixels) on a *width* x *height* image.

    Each pixel coordinate is mapped to the 0-1000 grid and rounded to the nearest integer,
    so reading the answer back is exact to within half a grid step (width/2000 px in x,
    height/2000 px in y). Scores are not written. The output is one line of JSON,
    ``[{"bbox_2d": [x1, y1, x2, y2], "label": "car"}, ...]``, or ``[]``.

    Boxes must lie inside the image (to within half a grid step, which rounds onto the
    border): clip or drop boxes of partly or wholly visible objects before calling; an
    out-of-image box is refused rather than clipped, so that swapped width and height or a
    wrong frame are caught here and not baked into training data.

    Raises:
        TypeError: an item that is not a :class:`Detection`.
        ValueError: a non-positive or non-finite width or height, or a box outside the image.
    """
    w, h = _image_size(width, height)
    items = []
    for det in dets:
        if not isinstance(det, Detection):
            raise TypeError(f"expected Detection, got {type(det).__name__}")
        x1, y1, x2, y2 = det.box
        grid = [_to_grid(x1, w), _to_grid(y1, h), _to_grid(x2, w), _to_grid(y2, h)]
        if not all(0 <= g <= GRID for g in grid):
            raise ValueError(f"box {det.box} lies outside the {w:g}x{h:g} image "
                             f"(grid {grid}); clip it first")
        items.append({"bbox_2d": grid, "label": det.label})
    return json.dumps(items, ensure_ascii=False)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key in object {keys}")
    return dict(pairs)


def _is_int(value: Any) -> bool:
    return type(value) is int   # not bool, not 12.0


def parse_detections(text: str, width: float, height: float) -> list[Detection]:
    """Parse a detection answer into pixel-space :class:`Detection` objects (score 1.0).

    Accepted (strict): surrounding whitespace, then either the JSON list itself or the JSON
    list inside one fenced block opened by three backticks and ``json`` on its own line and
    closed by three backticks. The list holds objects with exactly the keys "bbox_2d" (a list
    of four JSON integers, 0 <= v <= 1000, x1 <= x2, y1 <= y2) and "label" (a non-blank
    string); duplicate keys, NaN/Infinity, floats (even 12.0), booleans, missing or extra
    keys, a lone object instead of a list, and any text outside the JSON are refused.
    ``[]`` is a valid answer: no objects. Grid values map back to pixels as
    ``v / 1000 * width`` (x) and ``v / 1000 * height`` (y).

    Truncation: a strict prefix of an accepted answer never parses unless it only cuts
    trailing whitespace: a JSON list without its closing bracket, or a fence without its
    closing backticks, is rejected.

    Raises:
        AnswerParseError: (task "detection") for any malformed text, and for non-str inputs
            (None, bytes, numbers ...); never any other exception type for a bad text.
        ValueError: a non-positive or non-finite width or height (a caller bug, checked
            before the text).
    """
    return _parse(text, width, height, drop_inverted=False)[0]


def parse_model_detections(text: str, width: float,
                           height: float) -> tuple[list[Detection], int]:
    """A model's detection answer: :func:`parse_detections`, except that a box whose corners
    are out of order (x2 < x1 or y2 < y1) is dropped, not the whole answer. Returns the
    detections kept and how many boxes were dropped.

    Why: the answer grammar of constrained decoding (tasks/languages.py) keeps every answer
    well formed JSON with coordinates in 0..1000, but a regular language cannot compare two
    numbers read apart (x1 <= x2 needs x1 and y1 remembered: a million states), and a
    diffusion decoder commits x1 and x2 in parallel. One such box used to cost the frame all
    of its detections. Every other fault (bad JSON, wrong keys, values off the grid) still
    raises :class:`AnswerParseError`, as :func:`parse_detections` does.
    """
    return _parse(text, width, height, drop_inverted=True)


def _parse(text: str, width: float, height: float, *,
           drop_inverted: bool) -> tuple[list[Detection], int]:
    """:func:`parse_detections` (``drop_inverted`` False) and :func:`parse_model_detections`."""
    w, h = _image_size(width, height)
    raw = as_text(TASK, text)
    body = raw.strip()
    if not body:
        raise AnswerParseError(TASK, raw, "empty answer")
    if body.startswith("```"):
        fence = _FENCE.fullmatch(body)
        if fence is None:
            raise AnswerParseError(TASK, raw, "a fenced block must open with ```json on its "
                                              "own line and close with ```")
        body = fence.group("body")
    try:
        value = json.loads(body, parse_constant=_reject_constant,
                           object_pairs_hook=_no_duplicate_keys)
    except Exception as exc:  # noqa: BLE001 - ValueError, RecursionError on deep nesting ...
        raise AnswerParseError(TASK, raw, f"not a single JSON value: {exc}") from None
    if not isinstance(value, list):
        raise AnswerParseError(TASK, raw, f"expected a JSON list, got {type(value).__name__}")
    dets, dropped = [], 0
    for i, item in enumerate(value):
        where = f"item {i + 1}"
        if not isinstance(item, dict):
            raise AnswerParseError(TASK, raw, f"{where} is not a JSON object")
        if set(item) != _KEYS:
            raise AnswerParseError(
                TASK, raw, f"{where} must have exactly the keys bbox_2d and label, "
                           f"got {sorted(item)!r}"[:200])
        bbox, label = item["bbox_2d"], item["label"]
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_int(v) for v in bbox):
            raise AnswerParseError(TASK, raw, f"{where}: bbox_2d must be a list of 4 integers")
        if not all(0 <= v <= GRID for v in bbox):
            raise AnswerParseError(TASK, raw, f"{where}: bbox_2d values must be in 0..{GRID}")
        gx1, gy1, gx2, gy2 = bbox
        if not isinstance(label, str) or not label.strip():
            raise AnswerParseError(TASK, raw, f"{where}: label must be a non-blank string")
        if gx2 < gx1 or gy2 < gy1:
            if drop_inverted:
                dropped += 1
                continue
            raise AnswerParseError(TASK, raw, f"{where}: bbox_2d needs x1 <= x2 and y1 <= y2")
        box = (gx1 / GRID * w, gy1 / GRID * h, gx2 / GRID * w, gy2 / GRID * h)
        try:
            dets.append(Detection(box=box, label=label))
        except ValueError as exc:  # not reachable after the checks above; kept as a guard
            raise AnswerParseError(TASK, raw, f"{where}: {exc}") from None
    return dets, dropped
