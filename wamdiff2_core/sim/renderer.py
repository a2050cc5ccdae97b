"""Offscreen camera rendering with Panda3D, on the CPU, with no display.

One scene per world; each camera of a rig (``camera.CameraRig``) views it with its own pose,
lens and offscreen buffer. Two passes share one camera's pose, lens and buffer (rendered one
after the other):

- colour: sky, ground, road surface, lane markings (solid and dashed), vehicles as
  flat-shaded boxes (each face's brightness baked into its vertex colours, no lights);
- id: only the vehicles, unlit, each painted with a colour that encodes its id; the
  decoded image says which vehicle (if any) is visible at every pixel, which gives
  occlusion-aware detection boxes.

The software renderer (``p3tinydisplay``) is used: it needs no GPU, no X server and no
EGL, and it is deterministic. The ground layers are drawn in a fixed order without depth
testing (they are coplanar; a depth buffer would make markings flicker with distance),
vehicles with depth testing on top, in the fixed order of their ids (so a depth tie between
two touching cars goes the same way in every process).

A frame's pixels depend on its episode alone, not on what the process rendered before
(``data generate --resume`` writes the bytes of an uninterrupted run): every renderer (one
per episode) builds its own scene, cameras and lens; all it takes from the process is an
offscreen buffer, which each pass clears whole (colour, depth, stencil) before drawing.
Buffers are pooled by size and handed from one renderer to the next because p3tinydisplay
never frees a buffer that has drawn geometry: one new buffer pair per episode grew a
process by 16 bytes a pixel per episode (0.9 MB at 320x180, 3.7 MB at 640x360, measured).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from wamdiff2_core.sim.camera import (VEHICLE_HEIGHT_M, CameraConfig, CameraRig, as_rig,
                                      camera_pose)

_PRC = """
load-display p3tinydisplay
window-type offscreen
audio-library-name null
framebuffer-multisample 0
sync-video false
notify-level error
notify-level-x11display fatal
default-directnotify-level error
"""
CHUNK_M = 40.0             # road geometry is built in pieces this long along each lane
CELL_M = 50.0              # spatial index cell for road chunks
STEP_M = 2.0               # sampling step along a lane
MARKING_WIDTH_M = 0.15
DASH_M, GAP_M = 3.0, 6.0
ID_LEVELS = 64             # id colours: 64 levels per channel (tinydisplay is off by <= 1)
MAX_ID = ID_LEVELS * ID_LEVELS - 2

SKY = (0.62, 0.76, 0.92, 1.0)
GRASS = (0.36, 0.47, 0.30, 1.0)
ASPHALT = (0.30, 0.30, 0.32, 1.0)
MARKING = (0.95, 0.95, 0.92, 1.0)
PALETTE = ((0.80, 0.15, 0.15), (0.15, 0.35, 0.80), (0.90, 0.75, 0.10), (0.95, 0.95, 0.95),
           (0.10, 0.55, 0.25), (0.55, 0.20, 0.65), (0.95, 0.50, 0.10), (0.20, 0.20, 0.22))

class SoftwareDisplay:
    """The process's Panda3D software pipe and graphics engine, and its idle offscreen
    buffers by size: the one owner of what rendering takes from the process.

    It is per process, not per renderer, because Panda3D makes one graphics pipe per process
    and p3tinydisplay never frees a buffer that has drawn: renderers hand their buffers back
    here and the next renderer of that size takes them (``software_display()``)."""

    def __init__(self):
        from panda3d.core import GraphicsEngine, GraphicsPipeSelection, loadPrcFileData

        loadPrcFileData("wamdiff2-sim", _PRC)
        selection = GraphicsPipeSelection.get_global_ptr()
        selection.load_aux_modules()
        self.pipe = selection.make_pipe("TinyOffscreenGraphicsPipe")
        if self.pipe is None:
            raise RuntimeError("Panda3D's software renderer (p3tinydisplay) is unavailable")
        self.engine = GraphicsEngine(self.pipe)
        self.idle: dict[tuple[int, int], list[_Offscreen]] = {}   # (width, height) -> buffers

    def acquire(self, width: int, height: int) -> "_Offscreen":
        """An idle buffer of this size, else a new one; active."""
        idle = self.idle.setdefault((width, height), [])
        screen = idle.pop() if idle else _Offscreen.make(self, width, height)
        screen.buffer.set_active(True)
        return screen

    def release(self, screen: "_Offscreen") -> None:
        """Take a buffer back, inactive and holding no camera (no scene is kept alive)."""
        from panda3d.core import NodePath

        screen.region.set_camera(NodePath())
        screen.buffer.set_active(False)
        size = (screen.buffer.get_x_size(), screen.buffer.get_y_size())
        self.idle.setdefault(size, []).append(screen)


@functools.cache
def software_display() -> SoftwareDisplay:
    """The process's SoftwareDisplay (made on first use; see the class for why one)."""
    return SoftwareDisplay()


@dataclass
class _Offscreen:
    """An offscreen RGB + depth buffer with its RAM texture and its one display region."""

    display: SoftwareDisplay
    buffer: object
    texture: object
    region: object

    @classmethod
    def make(cls, display: SoftwareDisplay, width: int, height: int) -> "_Offscreen":
        from panda3d.core import (FrameBufferProperties, GraphicsOutput, GraphicsPipe,
                                  Texture, WindowProperties)

        props = FrameBufferProperties()
        props.set_rgb_color(True)
        props.set_color_bits(24)
        props.set_depth_bits(24)
        buffer = display.engine.make_output(
            display.pipe, f"wamdiff2-camera-{width}x{height}", 0, props,
            WindowProperties.size(width, height), GraphicsPipe.BF_refuse_window)
        if buffer is None:
            raise RuntimeError("Panda3D could not open an offscreen buffer")
        texture = Texture()
        buffer.add_render_texture(texture, GraphicsOutput.RTM_copy_ram)
        return cls(display, buffer, texture, buffer.make_display_region())

    def render(self, camera, clear) -> np.ndarray:
        """Clear to ``clear``, draw what ``camera`` sees, return the (H, W, 3) uint8 RGB."""
        self.region.set_camera(camera)
        self.buffer.set_clear_color(clear)
        self.display.engine.render_frame()
        texture = self.texture
        data = bytes(texture.get_ram_image_as("RGB"))
        image = np.frombuffer(data, dtype=np.uint8).reshape(
            texture.get_y_size(), texture.get_x_size(), 3)
        return np.ascontiguousarray(image[::-1])   # Panda3D stores rows bottom-up


def encode_id(vehicle_id: int) -> tuple[float, float, float, float]:
    """The id-pass colour of a vehicle (RGBA floats)."""
    code = vehicle_id + 1
    if not 0 < code <= MAX_ID + 1:
        raise ValueError(f"vehicle id {vehicle_id} cannot be encoded (max {MAX_ID})")
    r, g = code % ID_LEVELS, code // ID_LEVELS
    return ((4 * r + 2) / 255.0, (4 * g + 2) / 255.0, 0.0, 1.0)


def decode_ids(rgb: np.ndarray) -> np.ndarray:
    """Id-pass image (H, W, 3) uint8 -> vehicle ids (H, W) int32, -1 where none."""
    code = (rgb[..., 1].astype(np.int32) // 4) * ID_LEVELS + rgb[..., 0].astype(np.int32) // 4
    return code - 1


@dataclass(frozen=True)
class Frame:
    """One rendered camera frame."""

    rgb: np.ndarray      # (H, W, 3) uint8
    ids: np.ndarray      # (H, W) int32, vehicle id or -1


@dataclass
class _View:
    """One camera of the rig: its config, its lens nodes (colour and id pass) and buffer."""

    config: CameraConfig
    cameras: list
    screen: _Offscreen | None


class CameraRenderer:
    """Renders the cameras of one world (one road) from the ego: one camera
    (``CameraConfig``) or a rig (``CameraRig``); reuse it for every frame. ``render`` gives
    the first camera's frame, ``render_rig`` every camera's, in the rig's order."""

    def __init__(self, config: CameraConfig | CameraRig, lanes: list) -> None:
        from panda3d.core import NodePath

        self.rig = as_rig(config)
        self.config = self.rig.first
        self._lanes = lanes
        self._color_root = NodePath("color")
        self._id_root = NodePath("id")
        self._clears = (SKY, (0, 0, 0, 1))                    # per pass: colour, id
        self._views = [self._make_view(camera) for camera in self.rig.cameras]
        for root in (self._color_root, self._id_root):
            root.set_light_off()
            root.set_two_sided(True)
        self._ground = self._make_ground()
        self._chunks: dict[tuple, object] = {}
        self._attached: set[tuple] = set()
        self._cells = self._index_chunks()
        self._vehicles: dict[int, tuple[object, object]] = {}

    # ----------------------------------------------------------------------------- set-up
    def _make_view(self, config: CameraConfig) -> _View:
        from panda3d.core import Camera, PerspectiveLens

        lens = PerspectiveLens()
        fx, fy, cx, cy = config.intrinsics
        lens.set_film_size(config.width / fx, config.height / fy)
        lens.set_focal_length(1.0)
        lens.set_film_offset((config.width / 2.0 - cx) / fx, (cy - config.height / 2.0) / fy)
        lens.set_near_far(config.near, config.far)
        cameras = [root.attach_new_node(Camera(f"camera-{config.name}", lens))
                   for root in (self._color_root, self._id_root)]
        return _View(config, cameras, software_display().acquire(config.width, config.height))

    def _make_ground(self):
        from wamdiff2_core.sim.meshes import quad_strip_node

        half = self.rig.far * 2.0
        corners = np.array([[-half, -half], [half, -half], [half, half], [-half, half]])
        node = self._color_root.attach_new_node(
            quad_strip_node("ground", corners[[0, 3]], corners[[1, 2]], GRASS))
        _ground_layer(node, 0)
        return node

    def _index_chunks(self) -> dict[tuple[int, int], list[tuple]]:
        cells: dict[tuple[int, int], list[tuple]] = {}
        for lane_no, lane in enumerate(self._lanes):
            count = max(1, math.ceil(lane.length / CHUNK_M))
            starts = np.arange(count) * CHUNK_M
            centres = lane.points(np.minimum(starts + CHUNK_M / 2, lane.length))
            for k, centre in enumerate(centres):
                cell = (int(centre[0] // CELL_M), int(centre[1] // CELL_M))
                cells.setdefault(cell, []).append((lane_no, k))
        return cells

    def _chunk(self, key: tuple):
        from wamdiff2_core.sim.meshes import lane_chunk_nodes

        if key not in self._chunks:
            lane = self._lanes[key[0]]
            start = key[1] * CHUNK_M
            end = min(lane.length, start + CHUNK_M)
            surface, markings = lane_chunk_nodes(lane, start, end, STEP_M, MARKING_WIDTH_M,
                                                 DASH_M, GAP_M, ASPHALT, MARKING)
            holder = self._color_root.attach_new_node(f"chunk-{key}")
            _ground_layer(holder.attach_new_node(surface), 1)
            if markings is not None:
                _ground_layer(holder.attach_new_node(markings), 2)
            holder.detach_node()
            self._chunks[key] = holder
        return self._chunks[key]

    # ----------------------------------------------------------------------------- frames
    def _update_road(self, centre: np.ndarray) -> None:
        reach = int(math.ceil((self.rig.far + CHUNK_M) / CELL_M))
        cx, cy = int(centre[0] // CELL_M), int(centre[1] // CELL_M)
        wanted = set()
        for dx in range(-reach, reach + 1):
            for dy in range(-reach, reach + 1):
                wanted.update(self._cells.get((cx + dx, cy + dy), ()))
        for key in sorted(self._attached - wanted):
            self._chunks[key].detach_node()
        for key in sorted(wanted - self._attached):
            self._chunk(key).reparent_to(self._color_root)
        self._attached = wanted

    def _update_vehicles(self, agents) -> None:
        from wamdiff2_core.sim.meshes import box_node

        present = set()
        for agent in agents:
            present.add(agent.id)
            if agent.id not in self._vehicles:
                colour = (*PALETTE[agent.id % len(PALETTE)], 1.0)
                lit = self._color_root.attach_new_node(box_node("vehicle", colour, lit=True))
                flat = self._id_root.attach_new_node(
                    box_node("vehicle-id", encode_id(agent.id), lit=False))
                for node in (lit, flat):
                    # Drawn in id order: the opaque bin sorts equal states by vertex-data
                    # address, so which of two touching cars won a depth tie (a box edge a
                    # pixel apart) depended on what the process had allocated before.
                    node.set_bin("fixed", agent.id)
                self._vehicles[agent.id] = (lit, flat)
            for node, root in zip(self._vehicles[agent.id], (self._color_root, self._id_root)):
                node.reparent_to(root)
                node.set_pos(agent.x, agent.y, 0.0)
                node.set_hpr(math.degrees(agent.yaw), 0.0, 0.0)
                node.set_scale(agent.length, agent.width, VEHICLE_HEIGHT_M)
        for vehicle_id, nodes in self._vehicles.items():
            if vehicle_id not in present:
                for node in nodes:
                    node.detach_node()

    def render(self, ego, agents) -> Frame:
        """Render the ego's first camera with ``agents`` (AgentStates, ego excluded)."""
        return self._render(ego, agents, self._views[:1])[0]

    def render_rig(self, ego, agents) -> list[Frame]:
        """Render every camera of the rig, in its order, on the same scene state."""
        return self._render(ego, agents, self._views)

    def _render(self, ego, agents, views: list[_View]) -> list[Frame]:
        # The scene is placed around the first camera (every camera is mounted on the ego).
        centre = camera_pose(self.config, ego.xy, ego.yaw)[0]
        self._ground.set_pos(centre[0], centre[1], 0.0)
        self._update_road(centre)
        self._update_vehicles(agents)
        frames = []
        for view in views:
            position, axes = camera_pose(view.config, ego.xy, ego.yaw)
            yaw_deg = math.degrees(math.atan2(axes[2][1], axes[2][0]))
            for camera in view.cameras:
                camera.set_pos(*position)
                camera.set_hpr(yaw_deg - 90.0, view.config.pitch_deg, 0.0)
            rgb, id_rgb = (view.screen.render(camera, clear)
                           for camera, clear in zip(view.cameras, self._clears))
            frames.append(Frame(rgb=rgb, ids=decode_ids(id_rgb)))
        return frames

    def close(self) -> None:
        """Hand the offscreen buffers back and drop the scene (idempotent)."""
        for view in self._views:
            if view.screen is not None:
                view.screen.display.release(view.screen)
                view.screen = None
        self._color_root.remove_node()
        self._id_root.remove_node()

    def __enter__(self) -> CameraRenderer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ground_layer(node, order: int) -> None:
    """Draw a coplanar ground layer in a fixed order, without depth test or write."""
    node.set_bin("background", order)
    node.set_depth_test(False)
    node.set_depth_write(False)
