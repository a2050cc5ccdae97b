"""The planned path drawn over the camera image (PNG frames for `bag eval` and `demo`).

Waypoints lie on the ground (z = 0) in the ego frame; they are projected with the camera
model the bag recorded (`camera_json`: intrinsics and mount, as in a data set's
camera.json), else its CameraInfo intrinsics with the simulator's mount, else the
simulator's default camera at the image's resolution. The projection is the simulator's
own (`wamdiff2_core.sim.camera.project`), the one its renderer is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from wamdiff2_core.sim.camera import CameraConfig, project

PLAN_RGB = (40, 230, 80)
TRUTH_RGB = (60, 140, 255)
BOX_RGB = (255, 160, 0)
FAIL_RGB = (255, 70, 70)
MIN_WIDTH = 640          # small frames are upscaled so the text stays legible


@dataclass(frozen=True)
class CameraModel:
    """A camera the overlay projects with, and where its numbers came from."""

    config: CameraConfig
    source: str          # camera_json | camera_info | default

    @classmethod
    def from_bag(cls, doc: dict | None, info, width: int, height: int) -> CameraModel:
        """The best model the bag offers for images of `width` x `height`."""
        if doc and doc.get("width") == width and doc.get("height") == height:
            mount = doc.get("mount", {})
            config = CameraConfig(width=width, height=height, fx=doc["fx"], fy=doc["fy"],
                                  cx=doc["cx"], cy=doc["cy"],
                                  mount_x=mount.get("x", 1.0), mount_y=mount.get("y", 0.0),
                                  mount_z=mount.get("z", 1.4),
                                  pitch_deg=mount.get("pitch_deg", -2.0),
                                  near=doc.get("near", 0.5), far=doc.get("far", 150.0))
            return cls(config, "camera_json")
        if info is not None and int(info.width) == width and int(info.height) == height \
                and info.k[0] > 0:
            k = list(info.k)
            return cls(CameraConfig(width=width, height=height, fx=k[0], fy=k[4], cx=k[2],
                                    cy=k[5]), "camera_info")
        return cls(CameraConfig(width=width, height=height), "default")

    def project_ground(self, points: np.ndarray) -> np.ndarray:
        """Ego-frame ground points (N, 2) -> pixels (M, 2) of those in front of the camera."""
        pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        ground = np.concatenate([pts, np.zeros((len(pts), 1))], axis=1)     # (N, 3)
        pixels, depth = project(self.config, np.zeros(2), 0.0, ground)     # (N, 2), (N,)
        return pixels[depth > self.config.near]


def _polyline(img: np.ndarray, pixels: np.ndarray, colour, scale: float) -> None:
    if len(pixels) == 0:
        return
    pts = np.round(pixels * scale).astype(np.int32)
    pts = np.clip(pts, -10_000, 10_000)
    cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, colour, 2, cv2.LINE_AA)
    for p in pts:
        cv2.circle(img, (int(p[0]), int(p[1])), 3, colour, -1, cv2.LINE_AA)


def draw_overlay(rgb: np.ndarray, camera: CameraModel, planned: np.ndarray | None,
                 truth: np.ndarray | None, lines: list[str], ok: bool = True,
                 boxes: list | None = None) -> np.ndarray:
    """The frame (H, W, 3) RGB, upscaled to >= MIN_WIDTH, with the plan (green), the ground
    truth (blue), detected boxes (orange, pixel coordinates of `rgb`) and caption `lines`."""
    scale = max(1.0, MIN_WIDTH / rgb.shape[1])
    img = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST) \
        if scale > 1.0 else rgb.copy()
    if truth is not None:
        _polyline(img, camera.project_ground(truth), TRUTH_RGB, scale)
    if planned is not None:
        _polyline(img, camera.project_ground(planned), PLAN_RGB, scale)
    for det in boxes or []:
        x1, y1, x2, y2 = (int(round(c * scale)) for c in det.box)
        cv2.rectangle(img, (x1, y1), (x2, y2), BOX_RGB, 1, cv2.LINE_AA)
    band = 8 + 18 * len(lines)
    img[:band] = (img[:band] * 0.35).astype(np.uint8)
    for i, text in enumerate(lines):
        colour = (255, 255, 255) if ok or i else FAIL_RGB
        cv2.putText(img, text, (6, 18 + 18 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.5, colour, 1,
                    cv2.LINE_AA)
    legend = [("plan", PLAN_RGB)] + ([("expert", TRUTH_RGB)] if truth is not None else [])
    for j, (name, colour) in enumerate(legend):
        y = img.shape[0] - 10 - 18 * j
        cv2.putText(img, name, (img.shape[1] - 70, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, colour,
                    1, cv2.LINE_AA)
    return img


def write_png(path, rgb: np.ndarray) -> None:
    """Write an RGB image as PNG (OSError if it cannot be written)."""
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
        raise OSError(f"cannot write {path}")
