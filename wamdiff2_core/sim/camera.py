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

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from wamdiff2_core.geometry import rotation
from wamdiff2_core.tasks.cameras import DEFAULT_CAMERAS, check_cameras

VEHICLE_HEIGHT_M = 1.6   # vehicles are boxes this tall, taller than the camera mount


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
        if self.width < 16 or self.height < 16:
            raise ValueError(f"camera resolution {self.width}x{self.height} is too small")
        check_cameras([self.name], "camera name")
        if not 1.0 <= self.hfov_deg <= 170.0:
            raise ValueError(f"camera {self.name}: hfov_deg must be in [1, 170], got "
                             f"{self.hfov_deg}")
        if not -180.0 <= self.yaw_deg <= 180.0:
            raise ValueError(f"camera {self.name}: yaw_deg must be in [-180, 180], got "
                             f"{self.yaw_deg}")

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
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        entries = _rig_file(path)
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
        unknown = [n for n in names if n not in STANDARD_CAMERAS]
        if unknown or not names:
            raise ValueError(f"--cameras {spec!r}: not a rig file, and {unknown or spec!r} "
                             f"not among the standard cameras ({', '.join(STANDARD_CAMERAS)})")
        entries = [{"name": n, **STANDARD_CAMERAS[n]} for n in names]
    cameras = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"{spec}: camera {i + 1} must be a mapping with a name")
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            raise ValueError(f"{spec}: camera {entry['name']!r} has unknown keys {unknown}; "
                             f"known: {sorted(_KEYS)}")
        try:
            cameras.append(replace(defaults, **entry))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{spec}: {exc}") from None
    return CameraRig(tuple(cameras))


def _rig_file(path: Path) -> list:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the camera rig {path}: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                         ) from None
    if not isinstance(doc, dict) or set(doc) != {"cameras"} or \
            not isinstance(doc["cameras"], list) or not doc["cameras"]:
        raise ValueError(f"the camera rig {path} must hold one key, cameras: a non-empty "
                         f"list of cameras")
    return doc["cameras"]


def parse_resolution(text: str) -> tuple[int, int]:
    """``"320x180"`` -> (320, 180); ValueError on anything else."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"resolution must look like 320x180, got {text!r}") from None
    if width < 16 or height < 16:
        raise ValueError(f"resolution {text!r} is too small (at least 16x16)")
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
