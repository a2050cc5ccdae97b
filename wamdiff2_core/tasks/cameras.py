"""The scene opening of every prompt: one image per camera, each introduced by its name.

One camera named ``front`` (what the reference data and the bundled model know) opens with
the reference repository's text, byte for byte::

    Here is a front-view images from a driving vehicle: <image>

Any other camera list names each camera on its own line, in the rig's order::

    Here are the images of the cameras of a driving vehicle:
    front camera: <image>
    left camera: <image>

A camera name is template text, never user text: a lower-case identifier (``front``,
``front_left``), which is also a valid ROS topic name token, so the node can subscribe to
``~/input/<name>/image`` and no name can hold a placeholder. The images of a prompt come in
the order of its cameras; the first camera is the one detection boxes are drawn on
(docs/tasks.md, "Several cameras").
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from .text import IMAGE_PLACEHOLDER

FRONT = "front"
#: The camera list of a model or a data set that names none: the front camera alone.
DEFAULT_CAMERAS: tuple[str, ...] = (FRONT,)
MAX_CAMERAS = 16
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")

#: The reference repository's opening, typo ("images") included.
SCENE_PREFIX = f"Here is a front-view images from a driving vehicle: {IMAGE_PLACEHOLDER}\n"
_RIG_HEADER = "Here are the images of the cameras of a driving vehicle:\n"
_RIG_LINE = "{name} camera: " + IMAGE_PLACEHOLDER + "\n"
# The opening of a prompt, read back: the reference text, or the header and one line per
# camera.
SCENE_PATTERN = (f"(?:{re.escape(SCENE_PREFIX)}|{re.escape(_RIG_HEADER)}"
                 f"(?P<lines>(?:[a-z][a-z0-9_]{{0,31}} camera: "
                 f"{re.escape(IMAGE_PLACEHOLDER)}\\n)+))")
_SCENE = re.compile(SCENE_PATTERN)
_LINE = re.compile(f"([a-z][a-z0-9_]*) camera: {re.escape(IMAGE_PLACEHOLDER)}\\n")


def check_cameras(cameras: Any, what: str = "cameras") -> tuple[str, ...]:
    """``cameras`` as a tuple of names; ValueError (one sentence naming ``what``) for an
    empty list, a repeated name, more than ``MAX_CAMERAS``, or a name that is not a
    lower-case identifier (``[a-z][a-z0-9_]*``, at most 32 characters)."""
    if isinstance(cameras, str) or not isinstance(cameras, Sequence):
        raise ValueError(f"{what} must be a list of camera names, got {cameras!r}")
    names = tuple(cameras)
    if not names:
        raise ValueError(f"{what} must name at least one camera")
    if len(names) > MAX_CAMERAS:
        raise ValueError(f"{what} names {len(names)} cameras; at most {MAX_CAMERAS}")
    for name in names:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"{what}: camera name {name!r} must be a lower-case identifier "
                             f"([a-z][a-z0-9_]*, at most 32 characters)")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a camera twice: {list(names)}")
    return names


def scene_prefix(cameras: Sequence[str] = DEFAULT_CAMERAS) -> str:
    """The opening of a prompt for images of ``cameras`` (in that order): the reference
    text for ``("front",)``, else one named line per camera. ValueError for a bad list
    (:func:`check_cameras`)."""
    names = check_cameras(cameras)
    if names == DEFAULT_CAMERAS:
        return SCENE_PREFIX
    return _RIG_HEADER + "".join(_RIG_LINE.format(name=n) for n in names)


def read_scene(match: re.Match) -> tuple[str, ...] | None:
    """The cameras of a :data:`SCENE_PATTERN` match (its groups), None when a name repeats
    or the lines name the front camera alone (which opens with the reference text)."""
    if match.group("lines") is None:
        return DEFAULT_CAMERAS
    names = tuple(_LINE.findall(match.group("lines")))
    if len(set(names)) != len(names) or names == DEFAULT_CAMERAS:
        return None
    return names


def prompt_cameras(prompt: str) -> tuple[str, ...] | None:
    """The cameras a prompt's opening names, in order (``("front",)`` for the reference
    opening); None for a prompt that opens with neither form (text of another data set)."""
    match = _SCENE.match(prompt) if isinstance(prompt, str) else None
    return read_scene(match) if match else None
