"""Camera models: resolution, pinhole intrinsics, mount; numpy projection; camera rigs.

Pixel coordinates are continuous, origin at the top-left corner of the image, u right,
v down; pixel (i, j) covers [i, i+1) x [j, j+1). A point at (X right, Y up, Z forward) in
the camera frame lands at ``u = cx + fx X / Z``, ``v = cy - fy Y / Z``. The Panda3D
renderer builds its lens from the same numbers, and tests hold the two to each other.

A :class:`CameraRig` is a list of named cameras (pose and field of view each), from a rig
file or a list of standard names (:func:`load_rig`); its first camera is the one detection
boxes are drawn on, and its names are the cameras a prompt names (``tasks.scene_prefix``).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from wamdiff2_core.geometry import rotation
from wamdiff2_core.tasks.cameras import DEFAULT_CAMERAS, MAX_CAMERAS, check_cameras

RIG_MAX_BYTES = 1 << 20        # a rig of 16 cameras is about 4 KB
VEHICLE_HEIGHT_M = 1.6   # vehicles are boxes this tall, taller than the camera mount


# The renderer's limits: each side at most 4096 pixels and 4K UHD in all (a larger
# offscreen buffer aborts Panda3D's allocator rather than raising).
MIN_SIDE, MAX_SIDE, MAX_PIXELS = 16, 4096, 3840 * 2160
_RANGES = {"hfov_deg": (1.0, 170.0), "yaw_deg": (-180.0, 180.0), "pitch_deg": (-90.0, 90.0),
           "mount_x": (-50.0, 50.0), "mount_y": (-50.0, 50.0), "mount_z": (0.0, 50.0),
           "near": (1e-3, 1e4), "far": (1e-3, 1e4)}


def _check_number(config: "CameraConfig", key: str, low: float, high: float,
                  integer: bool = False, optional: bool = False) -> None:
    """ValueError (one sentence naming the camera and the field) unless the field is a
    number (an integer where ``integer``; None allowed where ``optional``) in [low, high]."""
    value = getattr(config, key)
    if value is None and optional:
        return
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or \
            not (low <= value <= high and math.isfinite(value)):
        what = "an integer" if integer else "a finite number"
        raise ValueError(f"camera {config.name}: {key} must be {what} in [{low:g}, {high:g}], "
                         f"got {value!r}")


@dataclass(frozen=True)
class CameraConfig:
    """One camera: its name, image size, intrinsics (derived from ``hfov_deg`` unless given)
    and mount on the ego (ego frame: x forward, y left, z up from the ground; ``yaw_deg``
    turns it to the left of straight ahead)."""

    width: int = 320
    height: int = 180
    hfov_deg: float = 80.0
    fx: float | None = None
    fy: float | None = None
    cx: float | None = None
    cy: float | None = None
    mount_x: float = 1.0
    mount_y: float = 0.0
    mount_z: float = 1.4
    pitch_deg: float = -2.0        # negative looks down
    near: float = 0.5
    far: float = 150.0
    name: str = DEFAULT_CAMERAS[0]
    yaw_deg: float = 0.0

    def __post_init__(self) -> None:
        check_cameras([self.name], "camera name")
        for key in ("width", "height"):
            _check_number(self, key, MIN_SIDE, MAX_SIDE, integer=True)
        if self.width * self.height > MAX_PIXELS:
            raise ValueError(f"camera {self.name}: {self.width}x{self.height} is more than "
                             f"the renderer's limit of {MAX_PIXELS} pixels (3840x2160)")
        for key, (low, high) in _RANGES.items():
            _check_number(self, key, low, high)
        for key, side in (("fx", self.width), ("fy", self.height)):
            # a focal length for a field of view of 1 to 170 degrees, as hfov_deg
            _check_number(self, key, side / 2 / math.tan(math.radians(85.0)),
                          side / 2 / math.tan(math.radians(0.5)), optional=True)
        _check_number(self, "cx", 0.0, float(self.width), optional=True)
        _check_number(self, "cy", 0.0, float(self.height), optional=True)
        if not self.near < self.far:
            raise ValueError(f"camera {self.name}: near ({self.near}) must be less than far "
                             f"({self.far})")

    @property
    def intrinsics(self) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) in pixels."""
        focal = (self.width / 2.0) / math.tan(math.radians(self.hfov_deg) / 2.0)
        return (self.fx if self.fx is not None else focal,
                self.fy if self.fy is not None else (self.fx or focal),
                self.cx if self.cx is not None else self.width / 2.0,
                self.cy if self.cy is not None else self.height / 2.0)

    def to_json(self) -> dict:
        """The ``camera.json`` document of a data set (see docs/INTERFACES.md)."""
        fx, fy, cx, cy = self.intrinsics
        return {"width": self.width, "height": self.height, "fx": round(fx, 6),
                "fy": round(fy, 6), "cx": round(cx, 6), "cy": round(cy, 6),
                "mount": {"x": self.mount_x, "y": self.mount_y, "z": self.mount_z,
                          "pitch_deg": self.pitch_deg, "frame": "ego: x forward, y left, z up"},
                "near": self.near, "far": self.far, "vehicle_height": VEHICLE_HEIGHT_M}

    def rig_json(self) -> dict:
        """The camera's entry in a rig's ``camera.json``: ``to_json`` with its name and its
        mount's yaw."""
        doc = self.to_json()
        return {"name": self.name, **doc, "mount": {**doc["mount"], "yaw_deg": self.yaw_deg}}


#: Poses of the cameras a rig can name without a file (``load_rig("front,left")``): yaw to
#: the left of straight ahead and the mount's lateral offset, the rest as ``CameraConfig``.
STANDARD_CAMERAS: dict[str, dict] = {
    "front": {},
    "front_left": {"yaw_deg": 55.0, "mount_x": 0.9, "mount_y": 0.8},
    "front_right": {"yaw_deg": -55.0, "mount_x": 0.9, "mount_y": -0.8},
    "left": {"yaw_deg": 90.0, "mount_x": 0.0, "mount_y": 0.9},
    "right": {"yaw_deg": -90.0, "mount_x": 0.0, "mount_y": -0.9},
    "rear": {"yaw_deg": 180.0, "mount_x": -2.0},
}
_KEYS = {f.name for f in fields(CameraConfig)}


@dataclass(frozen=True)
class CameraRig:
    """Named cameras in order (the order of a prompt's images); the first one is the
    camera detection boxes are drawn on."""

    cameras: tuple[CameraConfig, ...] = (CameraConfig(),)

    def __post_init__(self) -> None:
        cameras = tuple(self.cameras)
        if not all(isinstance(c, CameraConfig) for c in cameras):
            raise ValueError("a camera rig holds CameraConfig cameras")
        check_cameras([c.name for c in cameras], "camera rig")
        object.__setattr__(self, "cameras", cameras)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)

    @property
    def first(self) -> CameraConfig:
        return self.cameras[0]

    @property
    def far(self) -> float:
        """The farthest any camera sees (metres)."""
        return max(c.far for c in self.cameras)

    def to_json(self) -> dict:
        """The ``camera.json`` document: the first camera's (what one-camera readers take),
        and with several cameras every camera's (``rig_json``) under ``"rig"``, in order."""
        doc = self.first.to_json()
        return doc if len(self.cameras) == 1 else \
            {**doc, "rig": [c.rig_json() for c in self.cameras]}


def as_rig(camera: "CameraConfig | CameraRig") -> CameraRig:
    """A rig of one camera, or the rig itself."""
    return camera if isinstance(camera, CameraRig) else CameraRig((camera,))


def load_rig(spec: str, defaults: CameraConfig = CameraConfig()) -> CameraRig:
    """A camera rig from ``spec``: a rig file (YAML or JSON: ``cameras:``, a list of
    mappings with ``name`` and any ``CameraConfig`` field) or comma-separated names of
    :data:`STANDARD_CAMERAS` (``front,left``). Fields a camera does not set are
    ``defaults``' (the command line's resolution and field of view). ValueError (one
    sentence) for an unreadable file, an unknown key or name, or a bad value."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("--cameras is empty: give a rig file or camera names (front,left)")
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") or _is_file(path):
        entries, where = _rig_file(path), f"the camera rig {path}"
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
        if len(names) > MAX_CAMERAS:
            raise ValueError(f"--cameras names {len(names)} cameras; at most {MAX_CAMERAS}")
        unknown = [n for n in names if n not in STANDARD_CAMERAS]
        if unknown or not names:
            raise ValueError(f"--cameras {spec[:200]!r}: not a rig file, and "
                             f"{unknown[:5] or spec[:200]!r} not among the standard cameras "
                             f"({', '.join(STANDARD_CAMERAS)})")
        entries, where = [{"name": n, **STANDARD_CAMERAS[n]} for n in names], "--cameras"
    cameras = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"{where}: camera {i + 1} must be a mapping with a name")
        unknown = sorted(map(str, set(entry) - _KEYS))
        if unknown:
            raise ValueError(f"{where}: camera {str(entry['name'])[:40]!r} has unknown keys "
                             f"{unknown[:5]}; known: {sorted(_KEYS)}")
        try:
            cameras.append(replace(defaults, **entry))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    try:
        return CameraRig(tuple(cameras))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _is_file(path: Path) -> bool:
    """Whether ``path`` names a file (a name too long for the file system names none)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _rig_file(path: Path) -> list:
    from wamdiff2_core.user_files import read_json, read_yaml

    what = "the camera rig"
    doc = read_json(path, what, RIG_MAX_BYTES) if path.suffix == ".json" else \
        read_yaml(path, what, RIG_MAX_BYTES)
    if not isinstance(doc, dict) or set(doc) != {"cameras"} or \
            not isinstance(doc["cameras"], list) or not doc["cameras"]:
        raise ValueError(f"the camera rig {path} must hold one key, cameras: a non-empty "
                         f"list of cameras")
    if len(doc["cameras"]) > MAX_CAMERAS:
        raise ValueError(f"the camera rig {path} has {len(doc['cameras'])} cameras; at most "
                         f"{MAX_CAMERAS}")
    return doc["cameras"]


def parse_resolution(text: str) -> tuple[int, int]:
    """``"320x180"`` -> (320, 180); ValueError on anything else."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"resolution must look like 320x180, got {text!r}") from None
    if width < MIN_SIDE or height < MIN_SIDE:
        raise ValueError(f"resolution {text!r} is too small (at least 16x16)")
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
        raise ValueError(f"resolution {text!r} is larger than the renderer's limit (each "
                         f"side at most {MAX_SIDE}, {MAX_PIXELS} pixels in all: 3840x2160)")
    return width, height


def camera_pose(config: CameraConfig, ego_xy: np.ndarray, ego_yaw: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """Camera centre (3,) and rotation (3, 3) whose rows are the camera's right, up and
    forward axes, all in the map frame."""
    mount = rotation(ego_yaw) @ np.array([config.mount_x, config.mount_y])
    centre = np.array([ego_xy[0] + mount[0], ego_xy[1] + mount[1], config.mount_z])
    pitch = math.radians(config.pitch_deg)
    yaw = ego_yaw + math.radians(config.yaw_deg)
    c, s = math.cos(yaw), math.sin(yaw)
    forward_h = np.array([c, s, 0.0])
    left_h = np.array([-s, c, 0.0])
    forward = math.cos(pitch) * forward_h + math.sin(pitch) * np.array([0.0, 0.0, 1.0])
    up = -math.sin(pitch) * forward_h + math.cos(pitch) * np.array([0.0, 0.0, 1.0])
    return centre, np.stack([-left_h, up, forward])


def project(config: CameraConfig, ego_xy: np.ndarray, ego_yaw: float,
            points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map points (N, 3) -> pixels (N, 2) and depth along the optical axis (N,)."""
    centre, axes = camera_pose(config, ego_xy, ego_yaw)
    cam = (np.asarray(points, dtype=np.float64) - centre) @ axes.T   # (N, 3) right, up, fwd
    fx, fy, cx, cy = config.intrinsics
    depth = cam[:, 2]
    safe = np.where(np.abs(depth) < 1e-9, 1e-9, depth)
    return np.stack([cx + fx * cam[:, 0] / safe, cy - fy * cam[:, 1] / safe], axis=1), depth


def box_points(x: float, y: float, yaw: float, length: float, width: float,
               height: float = VEHICLE_HEIGHT_M) -> np.ndarray:
    """The eight corners (8, 3) of a vehicle box standing on the ground, map frame."""
    half = np.array([[length / 2, width / 2], [-length / 2, width / 2],
                     [-length / 2, -width / 2], [length / 2, -width / 2]])
    xy = half @ rotation(yaw).T + np.array([x, y])
    bottom = np.concatenate([xy, np.zeros((4, 1))], axis=1)
    top = np.concatenate([xy, np.full((4, 1), height)], axis=1)
    return np.concatenate([bottom, top])


def projected_box(config: CameraConfig, ego_xy: np.ndarray, ego_yaw: float,
                  corners: np.ndarray) -> tuple[float, float, float, float] | None:
    """Image box of a 3-D box's corners (8, 3), clipped to the image; None when any corner
    is behind the near plane or the box misses the image."""
    pixels, depth = project(config, ego_xy, ego_yaw, corners)
    if (depth <= config.near).any():
        return None
    x1, y1 = np.clip(pixels.min(axis=0), 0, [config.width, config.height])
    x2, y2 = np.clip(pixels.max(axis=0), 0, [config.width, config.height])
    if x2 <= x1 or y2 <= y1:
        return None
    return float(x1), float(y1), float(x2), float(y2)
