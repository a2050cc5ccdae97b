"""The front camera model: resolution, pinhole intrinsics, mount; numpy projection.

Pixel coordinates are continuous, origin at the top-left corner of the image, u right,
v down; pixel (i, j) covers [i, i+1) x [j, j+1). A point at (X right, Y up, Z forward) in
the camera frame lands at ``u = cx + fx X / Z``, ``v = cy - fy Y / Z``. The Panda3D
renderer builds its lens from the same numbers, and tests hold the two to each other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wamdiff2_core.geometry import rotation

VEHICLE_HEIGHT_M = 1.6   # vehicles are boxes this tall, taller than the camera mount


@dataclass(frozen=True)
class CameraConfig:
    """Front camera: image size, intrinsics (derived from ``hfov_deg`` unless given) and
    mount on the ego (ego frame: x forward, y left, z up from the ground)."""

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

    def __post_init__(self) -> None:
        if self.width < 16 or self.height < 16:
            raise ValueError(f"camera resolution {self.width}x{self.height} is too small")

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
    c, s = math.cos(ego_yaw), math.sin(ego_yaw)
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
