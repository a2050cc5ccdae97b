"""``wamdiff2 bag record-sim``: simulator episodes as a ROS 2 bag (see docs/bags.md).

Each episode runs the data generator's expert episode (``wamdiff2_core.sim.episode``) for
the camera frames and their ground truth, and a replica of the same world (same scenario
and seed: highway-env is deterministic) for odometry at the 10 Hz control rate; the replica
is checked against every captured frame. Messages are built as rclpy messages and
serialized by rclpy, so every type is exactly what a ROS 2 Jazzy install reads, then
re-encoded by rosbags with zeroed padding (`bag_io.canonical_cdr`): same arguments, same
bytes. The bag is written with rosbags.

Stamps: episode 0 starts at START_TIME_NS (a fixed epoch, for reproducible bags); each
further episode starts one second after the previous one ended. Header stamps are the
simulation time of the sample; the log (receive) time of every message equals its stamp.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import cv2
import numpy as np
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import Header, String

from wamdiff2_core.geometry import wrap_angle
from wamdiff2_core.sim.camera import CameraConfig, CameraRig, load_rig
from wamdiff2_core.sim.episode import Capture, EpisodeConfig, run_episode
from wamdiff2_core.sim.generator import GeneratorConfig, episode_seed, frame_records
from wamdiff2_core.sim.scenarios import SCENARIOS
from wamdiff2_core.sim.world import CONTROL_DT, World
from wamdiff2_ros.node import outputs
from wamdiff2_ros.tools.bag_io import BagWriter, canonical_cdr, qos_profile
from wamdiff2_ros.tools.bag_layout import (BASE_FRAME, ODOM_FRAME, SIM_TOPICS, TYPES,
                                           camera_frame, ground_truth_document,
                                           sim_camera_topics)

START_TIME_NS = 1_700_000_000 * 1_000_000_000     # 2023-11-14T22:13:20Z
EPISODE_GAP_NS = 1_000_000_000
STEP_NS = round(CONTROL_DT * 1e9)
JPEG_FORMAT = "rgb8; jpeg compressed bgr8"          # what image_transport writes


@dataclass(frozen=True)
class RecordConfig:
    """Everything that determines a recorded bag's bytes (the output path aside)."""

    episodes: int = 1
    seed: int = 0
    frames: int = 20                      # camera frames per episode (at most)
    frame_interval_s: float = 0.5
    warmup_s: float = 1.0
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    width: int = 320
    height: int = 180
    jpeg_quality: int = 90
    cameras: str = ""                     # a camera rig (sim.camera.load_rig); "": the front

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("episodes must be at least 1")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError("jpeg quality must be in 1..100")
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown or not self.scenarios:
            raise ValueError(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")

    def rig(self) -> CameraRig:
        """The cameras recorded (ValueError for a bad rig)."""
        camera = CameraConfig(width=self.width, height=self.height)
        return load_rig(self.cameras, camera) if self.cameras else CameraRig((camera,))

    def episode_config(self) -> EpisodeConfig:
        return EpisodeConfig(frames=self.frames, frame_interval_s=self.frame_interval_s,
                             warmup_s=self.warmup_s, camera=self.rig())

    def generator_config(self) -> GeneratorConfig:
        return GeneratorConfig(episodes=self.episodes, seed=self.seed,
                               scenarios=self.scenarios, episode=self.episode_config())


@dataclass(frozen=True)
class BagMessage:
    """One message to record: the rclpy message and where and when it goes."""

    topic: str
    msgtype: str
    log_ns: int
    msg: object


@dataclass(frozen=True)
class RecordSummary:
    out: str
    episodes: int
    frames: int
    messages: dict[str, int]
    duration_s: float
    bytes: int
    seconds: float = 0.0
    skipped_episodes: list[int] = field(default_factory=list)


# ------------------------------------------------------------------------------ messages
def stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def image_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str = camera_frame("front")) -> Image:
    """rgb8 sensor_msgs/Image of an (H, W, 3) uint8 array."""
    msg = Image(header=Header(stamp=stamp(stamp_ns), frame_id=frame_id),
                height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", is_bigendian=0,
                step=rgb.shape[1] * 3)
    msg.data = np.ascontiguousarray(rgb).tobytes()
    return msg


def compressed_msg(rgb: np.ndarray, stamp_ns: int, quality: int,
                   frame_id: str = camera_frame("front")) -> CompressedImage:
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG")
    msg = CompressedImage(header=Header(stamp=stamp(stamp_ns), frame_id=frame_id),
                          format=JPEG_FORMAT)
    msg.data = jpeg.tobytes()
    return msg


def camera_info_msg(camera: CameraConfig, stamp_ns: int) -> CameraInfo:
    """Pinhole intrinsics without distortion (the renderer's lens)."""
    fx, fy, cx, cy = camera.intrinsics
    return CameraInfo(header=Header(stamp=stamp(stamp_ns), frame_id=camera_frame(camera.name)),
                      height=camera.height, width=camera.width, distortion_model="plumb_bob",
                      d=[0.0] * 5, k=[fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
                      r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                      p=[fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0])


def odometry_msg(stamp_ns: int, x: float, y: float, yaw: float, velocity: np.ndarray,
                 yaw_rate: float) -> Odometry:
    """Pose in `odom` (the simulator's map frame), twist in `base_link` (x forward, y left)."""
    msg = Odometry(header=Header(stamp=stamp(stamp_ns), frame_id=ODOM_FRAME),
                   child_frame_id=BASE_FRAME)
    msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
    msg.pose.pose.orientation = outputs.quaternion_from_yaw(float(yaw))
    msg.twist.twist.linear.x, msg.twist.twist.linear.y = (float(v) for v in velocity)
    msg.twist.twist.angular.z = float(yaw_rate)
    return msg


def ground_truth_path_msg(ego_future: np.ndarray, stamp_ns: int):
    """The expert's 8 future waypoints (base_link at the frame); pose i stamped t + 0.5 (i+1)."""
    path = outputs.path_msg(ego_future, stamp(stamp_ns), BASE_FRAME)
    for i, pose in enumerate(path.poses):   # each pose stamped with its own future time
        pose.header = Header(stamp=stamp(stamp_ns + (i + 1) * 500_000_000),
                             frame_id=BASE_FRAME)
    return path


def frame_meta(capture: Capture, scenario: str, seed: int, episode: int,
               config: RecordConfig) -> dict:
    """The data set's meta of every task for this frame, merged (docs/INTERFACES.md)."""
    meta: dict = {}
    rig = config.rig()
    for record in frame_records(capture, scenario, seed, episode, config.generator_config(),
                                image_paths=[_camera_topics(rig, n).image for n in rig.names]):
        meta.update(record["meta"])
    return meta


# ------------------------------------------------------------------------------ episodes
def _odometry_track(scenario: str, seed: int, last_step: int, captures: list[Capture]
                    ) -> list[tuple[float, float, float, np.ndarray, float]]:
    """(x, y, yaw, body velocity (2,), yaw rate) at every control step of the replica world."""
    world = World(scenario, seed, ego="expert")
    by_step = {c.step: c for c in captures}
    track, prev_yaw = [], world.ego_state().yaw
    for step in range(last_step + 1):
        if step > 0:
            world.step()
        ego = world.ego_state()
        if step in by_step and by_step[step].ego != ego:
            raise RuntimeError(f"the odometry replica of {scenario} seed {seed} diverged from "
                               f"the recorded episode at step {step}")
        velocity, _ = world.ego_motion()
        yaw_rate = float(wrap_angle(ego.yaw - prev_yaw)) / CONTROL_DT if step else 0.0
        prev_yaw = ego.yaw
        track.append((ego.x, ego.y, ego.yaw, np.asarray(velocity, dtype=np.float64), yaw_rate))
    return track


def episode_messages(config: RecordConfig, episode: int, start_ns: int
                     ) -> tuple[list[BagMessage], int, int]:
    """The messages of one episode from `start_ns`; also its end time and frame count."""
    scenario = config.scenarios[episode % len(config.scenarios)]
    seed = episode_seed(config.seed, episode)
    _, captures = run_episode(scenario, seed, episode, config.episode_config())
    if not captures:
        return [], start_ns, 0
    track = _odometry_track(scenario, seed, captures[-1].step, captures)
    by_step = {c.step: c for c in captures}
    rig = config.rig()
    topics, out = SIM_TOPICS, []
    for step, (x, y, yaw, velocity, yaw_rate) in enumerate(track):
        t = start_ns + step * STEP_NS
        out.append(BagMessage(topics.odometry, TYPES["odometry"], t,
                              odometry_msg(t, x, y, yaw, velocity, yaw_rate)))
        capture = by_step.get(step)
        if capture is None:
            continue
        meta = frame_meta(capture, scenario, seed, episode, config)
        out += [
            BagMessage(topics.command, TYPES["string"], t, String(data=capture.command)),
            BagMessage(topics.gt_path, TYPES["path"], t,
                       ground_truth_path_msg(capture.ego_future, t)),
            BagMessage(topics.gt_meta, TYPES["string"], t,
                       String(data=ground_truth_document(meta, t))),
        ]
        # each camera's messages, the trigger (first) camera's last: as a driver that
        # publishes the others first, so a reader in log order has them when it comes
        for camera, image in [*zip(rig.cameras, capture.images)][1:] + \
                [(rig.first, capture.images[0])]:
            own, frame_id = _camera_topics(rig, camera.name), camera_frame(camera.name)
            out += [BagMessage(own.camera_info, TYPES["camera_info"], t,
                               camera_info_msg(camera, t)),
                    BagMessage(own.image, TYPES["image"], t, image_msg(image, t, frame_id)),
                    BagMessage(own.compressed, TYPES["compressed"], t,
                               compressed_msg(image, t, config.jpeg_quality, frame_id))]
    return out, start_ns + len(track) * STEP_NS, len(captures)


def _camera_topics(rig: CameraRig, name: str):
    """Camera `name`'s topics: the simulator layout's for one camera, else its own."""
    return SIM_TOPICS if len(rig.cameras) == 1 else sim_camera_topics(name)


def sim_messages(config: RecordConfig, on_episode: Callable[[int, int], None] | None = None
                 ) -> Iterator[BagMessage]:
    """Every message of the recording, in log-time order (ties: the order written)."""
    rig = config.rig()
    for camera in rig.cameras:            # one camera: the data set's camera.json document
        doc = camera.to_json() if len(rig.cameras) == 1 else camera.rig_json()
        yield BagMessage(_camera_topics(rig, camera.name).camera_json, TYPES["string"],
                         START_TIME_NS, String(data=json.dumps(doc, sort_keys=True)))
    start = START_TIME_NS
    for episode in range(config.episodes):
        messages, end, frames = episode_messages(config, episode, start)
        yield from messages
        if on_episode is not None:
            on_episode(episode, frames)
        start = end + EPISODE_GAP_NS if frames else start


# The QoS offered by a recorded topic: the camera JSON is latched; everything else reliable.
_LATCHED = qos_profile(depth=1, transient_local=True)


def record_sim(out, config: RecordConfig, fmt: str | None = None, progress: bool = True
               ) -> RecordSummary:
    """Simulate `config` and write the bag to `out` (atomically; see bag_io.BagWriter)."""
    from tqdm import tqdm

    tic = time.perf_counter()
    counts: dict[str, int] = {}
    frames, skipped = 0, []
    first = last = None
    writer = BagWriter(out, fmt)          # checks the output path before any work
    with writer, tqdm(total=config.episodes, unit="episode", desc="bag record-sim",
                      disable=not progress, dynamic_ncols=True) as bar:
        def on_episode(episode: int, n: int) -> None:
            nonlocal frames
            frames += n
            if n == 0:
                skipped.append(episode)
            bar.update(1)

        writer.set_metadata("wamdiff2.record_sim", repr(config))
        for item in sim_messages(config, on_episode):
            writer.add_topic(item.topic, item.msgtype,
                             _LATCHED if item.topic.endswith("/camera_json") else None)
            raw = canonical_cdr(serialize_message(item.msg), item.msgtype)
            writer.write(item.topic, item.msgtype, item.log_ns, raw)
            counts[item.topic] = counts.get(item.topic, 0) + 1
            first = item.log_ns if first is None else first
            last = item.log_ns
    path = writer.out
    size = sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else \
        path.stat().st_size
    return RecordSummary(out=str(path), episodes=config.episodes, frames=frames,
                         messages=counts, duration_s=((last or 0) - (first or 0)) * 1e-9,
                         bytes=size, seconds=round(time.perf_counter() - tic, 2),
                         skipped_episodes=skipped)

