"""Camera frames of a bag with what the planner needs at each: command, ego motion, truth.

`FrameTopics.resolve` finds the topics (the simulator layout by default, any bag when the
camera topic is named; with a model of several cameras, each camera's) and checks them;
`read_frames` walks the bag in log-time order and converts messages with the node's own
conversions (`wamdiff2_ros.node.images`, `.odometry`) and gathers the other cameras' images
to each frame as the node does (`wamdiff2_ros.node.worker.gather_images`), so offline
evaluation sees exactly what the live node would.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
from nav_msgs.msg import Odometry, Path
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String

from wamdiff2_core.tasks import COMMANDS, DEFAULT_CAMERAS, MAX_ACCEL_MPS2, MAX_SPEED_MPS
from wamdiff2_core.user_files import parse_json
from wamdiff2_ros.node import params
from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.images import compressed_to_rgb, image_to_rgb
from wamdiff2_ros.node.odometry import EgoMotion, OdometryTracker, sample_from_msg
from wamdiff2_ros.tools.bag_io import BagError, BagReader, header_stamp_ns, message_class
from wamdiff2_ros.node.worker import HISTORY, CameraGap, CameraImage, gather_images
from wamdiff2_ros.tools.bag_layout import (CAMERA_TYPES, SIM_TOPICS, TYPES, parse_ground_truth,
                                           sim_camera_topics)

#: How the other cameras' images are gathered to a frame: the node's default parameters.
_NODE_DEFAULTS = {p.name: p.default for p in params.PARAMS}


@dataclass(frozen=True)
class FrameTopics:
    """The topics one evaluation reads; None where the bag has no such topic."""

    camera: str
    camera_type: str
    odometry: str | None = None
    command: str | None = None
    gt_path: str | None = None
    gt_meta: str | None = None
    camera_info: str | None = None
    camera_json: str | None = None
    cameras: tuple[str, ...] = DEFAULT_CAMERAS     # the camera names, the trigger's first
    others: tuple[str, ...] = ()                   # the topics of cameras[1:]

    @classmethod
    def resolve(cls, bag: BagReader, camera: str | None = None, odometry: str | None = None,
                command: str | None = None, gt_path: str | None = None,
                gt_meta: str | None = None, cameras: tuple[str, ...] = DEFAULT_CAMERAS,
                camera_topics: dict[str, str] | None = None) -> FrameTopics:
        """Named topics must exist with the right type; unnamed ones are looked up
        (simulator names first, else the only topic of the type); BagError otherwise.
        `cameras`: the model's cameras; with several, `camera_topics` (name -> topic) or
        the simulator's /camera/<name>/image_raw gives each camera's topic."""
        topics = _rig_topics(bag, cameras, camera_topics) if len(cameras) > 1 or \
            camera_topics else None
        if topics is not None:
            camera = topics[0]
        elif camera is None:
            camera = _find_camera(bag)
        camera_type = bag.require_topic(camera, *CAMERA_TYPES).msgtype
        for other in (topics or [])[1:]:
            if bag.require_topic(other, *CAMERA_TYPES).msgtype != camera_type:
                raise BagError(f"bag {bag.path}: camera topics {camera} and {other} are of "
                               f"different types; all cameras must be Image or all "
                               f"CompressedImage")

        def pick(given: str | None, default: str, msgtype: str, unique: bool) -> str | None:
            if given is not None:
                bag.require_topic(given, msgtype)
                return given
            if default in bag.topics and bag.topics[default].msgtype == msgtype:
                return default
            candidates = bag.topics_of_type(msgtype)
            return candidates[0] if unique and len(candidates) == 1 else None

        return cls(camera=camera, camera_type=camera_type,
                   odometry=pick(odometry, SIM_TOPICS.odometry, TYPES["odometry"], True),
                   command=pick(command, SIM_TOPICS.command, TYPES["string"], False),
                   gt_path=pick(gt_path, SIM_TOPICS.gt_path, TYPES["path"], False),
                   gt_meta=pick(gt_meta, SIM_TOPICS.gt_meta, TYPES["string"], False),
                   camera_info=pick(None, SIM_TOPICS.camera_info, TYPES["camera_info"], True),
                   camera_json=pick(None, SIM_TOPICS.camera_json, TYPES["string"], False),
                   cameras=tuple(cameras) if topics else DEFAULT_CAMERAS,
                   others=tuple((topics or [])[1:]))

    def describe(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}

    def names(self) -> list[str]:
        """The topics this evaluation reads (the ones the bag has)."""
        return [t for t in (self.camera, *self.others, self.odometry, self.command,
                            self.gt_path, self.gt_meta, self.camera_info, self.camera_json)
                if t]


def _deserialize(raw: bytes, cls, topic: str, bag: BagReader, index: int | None = None):
    """A message of ``cls`` from CDR bytes; BagError when the bytes are not one."""
    try:
        return deserialize_message(raw, cls)
    except Exception as exc:  # noqa: BLE001 - rclpy raises RMWError (RuntimeError) et al.
        which = f"message {index}" if index is not None else "a message"
        raise BagError(f"bag {bag.path} is corrupt: {which} on {topic} is not a valid "
                       f"{cls.__module__.split('.')[0]}/msg/{cls.__name__} "
                       f"({type(exc).__name__})") from None


def camera_rgb(msg) -> np.ndarray:
    """The (H, W, 3) RGB image of an Image or CompressedImage message, converted exactly as
    the node converts it; BadInput (the node's reason) for one the node would drop."""
    return image_to_rgb(msg) if isinstance(msg, Image) else compressed_to_rgb(msg)


def named_as_camera(name: str) -> bool:
    """Whether a topic name says it carries camera frames (``.../image_raw``,
    ``.../image``, either with ``/compressed``: the image_transport convention, the
    simulator's and the node's camera inputs)."""
    parts = name.rstrip("/").split("/")
    if parts[-1] == "compressed":
        parts = parts[:-1]
    return parts[-1] in ("image_raw", "image")


def check_camera_names(bag: BagReader, names: dict[str, str]) -> list[str]:
    """The camera topics among bag topics ``names`` (bag name -> published name): those of an
    image type. BagError, as `bag eval` refuses its camera topic, for a topic whose bag or
    published name is a camera's (``named_as_camera``) but whose type is not an image type
    (a String on the camera topic)."""
    for name, published in names.items():
        if named_as_camera(name) or named_as_camera(published):
            bag.require_topic(name, *CAMERA_TYPES)
    return [n for n in names if bag.topics[n].msgtype in CAMERA_TYPES]


def check_bag(bag: BagReader, topics: Iterable[str], cameras: Iterable[str],
              ordered: Iterable[str] = (), images: bool = False
              ) -> dict[tuple[str, int], BadInput]:
    """What `bag eval` and `bag replay` check before using a bag (one definition).

    BagError when the header stamps of a camera topic do not strictly increase (a repeated
    or backwards stamp), those of an ``ordered`` topic go backwards, or a message of
    ``topics`` does not deserialize as its type (named by topic and index). With
    ``images``: the camera messages the node would drop (``camera_rgb``: garbage or short
    image data, an unknown encoding ...), as {(topic, index in that topic): BadInput}."""
    topics, cameras = list(dict.fromkeys(topics)), list(cameras)
    bag.check_stamps(list(dict.fromkeys([*cameras, *ordered])), strict=cameras)
    classes = {n: message_class(bag.topics[n].msgtype, n) for n in topics if n in bag.topics}
    count: dict[str, int] = {}
    unusable: dict[tuple[str, int], BadInput] = {}
    for topic, _, _, raw in bag.messages(list(classes)):
        index = count.get(topic, 0)
        count[topic] = index + 1
        msg = _deserialize(raw, classes[topic], topic, bag, index)
        if images and topic in cameras:
            try:
                camera_rgb(msg)
            except BadInput as exc:
                unusable[(topic, index)] = exc
    return unusable


def _rig_topics(bag: BagReader, cameras: tuple[str, ...],
                camera_topics: dict[str, str] | None) -> list[str]:
    """Each camera's topic, in camera order: the given ones (they must name exactly the
    model's cameras), else the simulator's; BagError with the fix otherwise."""
    example = ",".join(f"{n}:=TOPIC" for n in cameras)
    if camera_topics:
        if set(camera_topics) != set(cameras):
            raise BagError(f"--camera-topics names the cameras {', '.join(camera_topics)} "
                           f"but the model reads {', '.join(cameras)} ({example})")
        return [camera_topics[n] for n in cameras]
    topics = [sim_camera_topics(n).image for n in cameras]
    missing = [t for t in topics if t not in bag.topics]
    if missing:
        raise BagError(f"the model reads the cameras {', '.join(cameras)} but bag {bag.path} "
                       f"has no {', '.join(missing)}: name each camera's topic with "
                       f"--camera-topics {example}")
    return topics


def _find_camera(bag: BagReader) -> str:
    if SIM_TOPICS.image in bag.topics:
        return SIM_TOPICS.image
    images = bag.topics_of_type(CAMERA_TYPES[0]) or bag.topics_of_type(CAMERA_TYPES[1])
    if len(images) == 1:
        return images[0]
    listing = ", ".join(f"{t.name} ({t.msgtype})" for t in bag.topics.values()) or "none"
    if not images:
        raise BagError(f"bag {bag.path} has no camera topic (no sensor_msgs/msg/Image or "
                       f"CompressedImage; topics: {listing})")
    raise BagError(f"bag {bag.path} has several camera topics ({', '.join(images)}); name "
                   "one with --camera-topic")


@dataclass(frozen=True)
class FrameTruth:
    """Ground truth of one frame: the expert's future and the data set's meta, if recorded."""

    ego_future: np.ndarray | None      # (8, 2) metres, ego frame, t = 0.5..4.0 s
    meta: dict                         # docs/INTERFACES.md meta keys ({} when absent)

    def record(self, task: str) -> dict:
        """A data-set record of `task` for the open-loop scorers."""
        meta = dict(self.meta)
        if self.ego_future is not None:
            meta["ego_future"] = self.ego_future.tolist()
        return {"id": f"{meta.get('stamp_ns', '')}_{task}", "task": task, "meta": meta}


@dataclass(frozen=True)
class BagFrame:
    """One camera frame and the inputs the planner gets with it."""

    index: int
    stamp_ns: int                      # header stamp of the camera message
    log_ns: int                        # when the recorder received it
    header: object                     # std_msgs/Header (rclpy)
    rgb: np.ndarray | None             # (H, W, 3) uint8; None when the image was unusable
    bad_input: BadInput | None         # why rgb is None
    command: str
    motion: EgoMotion
    truth: FrameTruth | None
    images: tuple[np.ndarray, ...] = ()   # every camera's image (rgb first) when complete
    gaps: tuple[CameraGap, ...] = ()       # cameras without an image for this frame

    @property
    def stamp_s(self) -> float:
        return self.stamp_ns * 1e-9


def _ground_truth(bag: BagReader, topics: FrameTopics) -> dict[int, FrameTruth]:
    """Ground truth by header stamp (ns): paths by their header, meta by its stamp_ns."""
    paths: dict[int, np.ndarray] = {}
    metas: dict[int, dict] = {}
    wanted = [t for t in (topics.gt_path, topics.gt_meta) if t]
    for topic, _, _, raw in bag.messages(wanted):
        if topic == topics.gt_path:
            msg = _deserialize(raw, Path, topic, bag)
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            paths[stamp] = np.array([[p.pose.position.x, p.pose.position.y]
                                     for p in msg.poses], dtype=np.float64).reshape(-1, 2)
        else:
            try:
                doc = parse_ground_truth(_deserialize(raw, String, topic, bag).data)
                metas[int(doc["stamp_ns"])] = doc
            except (ValueError, KeyError, TypeError):
                continue        # a String topic of another tool: not ground truth
    truth = {}
    for stamp in set(paths) | set(metas):
        future = paths.get(stamp)
        if future is None and "ego_future" in metas.get(stamp, {}):
            future = np.asarray(metas[stamp]["ego_future"], dtype=np.float64)
        truth[stamp] = FrameTruth(future, metas.get(stamp, {}))
    return truth


def camera_document(bag: BagReader, topics: FrameTopics
                    ) -> tuple[dict | None, CameraInfo | None]:
    """The recorded camera.json document and the first CameraInfo, where the bag has them."""
    doc = info = None
    if topics.camera_json:
        for _, _, _, raw in bag.messages([topics.camera_json]):
            try:
                text = _deserialize(raw, String, topics.camera_json, bag).data
                doc = parse_json(text.encode(), topics.camera_json, "camera document")
            except ValueError:                 # not JSON, nested too deep, NaN: none
                doc = None
            break
    if topics.camera_info:
        for _, _, _, raw in bag.messages([topics.camera_info]):
            info = _deserialize(raw, CameraInfo, topics.camera_info, bag)
            break
    return doc, info


def read_frames(bag: BagReader, topics: FrameTopics, default_command: str = "straight",
                check_stamps: bool = True) -> Iterator[BagFrame]:
    """Every camera frame in log-time order with the latest command and ego motion.

    Raises BagError up front (unless `check_stamps` is False: the caller checked with
    `BagReader.check_stamps`) if the camera's header stamps do not strictly increase. A
    frame whose image cannot be converted is yielded with `rgb` None and `bad_input` set;
    odometry the node would reject with its default limits (non-finite, out of order,
    implausible speed or acceleration: ``tasks.motion``) is skipped.
    """
    if check_stamps:
        bag.check_stamps([topics.camera], strict=[topics.camera])
    truth = _ground_truth(bag, topics)
    tracker = OdometryTracker()
    command = default_command
    msg_class = Image if topics.camera_type == TYPES["image"] else CompressedImage
    wanted = [t for t in (topics.camera, *topics.others, topics.odometry, topics.command) if t]
    history = {topic: deque(maxlen=HISTORY) for topic in topics.others}
    index = 0
    for topic, _, log_ns, raw in bag.messages(wanted):
        if topic in history:                          # another camera: kept to gather from
            try:
                history[topic].append(CameraImage(camera_rgb(_deserialize(raw, msg_class,
                                                                          topic, bag)),
                                                  None, header_stamp_ns(raw) * 1e-9, 0.0))
            except BadInput:
                pass                                  # the node drops it too
            continue
        if topic == topics.odometry:
            try:
                tracker.update(sample_from_msg(_deserialize(raw, Odometry, topic, bag),
                                               MAX_SPEED_MPS), MAX_ACCEL_MPS2)
            except BadInput:
                pass
        elif topic == topics.command and topic != topics.camera:
            text = _deserialize(raw, String, topic, bag).data.strip().lower()
            command = text if text in COMMANDS else default_command
        elif topic == topics.camera:
            msg = _deserialize(raw, msg_class, topic, bag, index)
            rgb, bad = None, None
            try:
                rgb = camera_rgb(msg)
            except BadInput as exc:
                bad = exc
            stamp = header_stamp_ns(raw)
            images, gaps = ((rgb,) if rgb is not None else (), ())
            if rgb is not None and topics.others:
                images, gaps = _gather(rgb, stamp, [history[t] for t in topics.others],
                                       topics.cameras)
            yield BagFrame(index=index, stamp_ns=stamp, log_ns=log_ns, header=msg.header,
                           rgb=rgb, bad_input=bad, command=command, motion=tracker.motion(),
                           truth=truth.get(stamp), images=images if not gaps else (),
                           gaps=gaps)
            index += 1


def _gather(rgb: np.ndarray, stamp_ns: int, histories: list, cameras: tuple[str, ...]
            ) -> tuple[tuple[np.ndarray, ...], tuple[CameraGap, ...]]:
    """The frame's images and gaps as the node with its default parameters gathers them."""
    trigger = CameraImage(rgb, None, stamp_ns * 1e-9, 0.0)
    frame, gaps = gather_images(trigger, {k: tuple(h) for k, h in enumerate(histories, 1)},
                                cameras, _NODE_DEFAULTS["camera_sync_tolerance_s"],
                                _NODE_DEFAULTS["input_timeout_s"])
    return frame.images, gaps
