"""The topics of a simulator bag and of the planner's outputs (documented in docs/bags.md).

`wamdiff2 bag record-sim` writes SIM_TOPICS; `bag eval` and `demo` look for them by default
(any other bag works with its topics named on the command line). Ground truth uses standard
types where one exists (nav_msgs/Path for the expert's future) and one documented JSON
document per frame (std_msgs/String) for the rest: there is no vision_msgs here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

NODE_NAME = "wamdiff2_planner"


@dataclass(frozen=True)
class SimTopics:
    """Topic names of a recorded simulator bag."""

    image: str = "/camera/front/image_raw"                        # sensor_msgs/Image rgb8
    compressed: str = "/camera/front/image_raw/compressed"        # sensor_msgs/CompressedImage
    camera_info: str = "/camera/front/camera_info"                # sensor_msgs/CameraInfo
    camera_json: str = "/camera/front/camera_json"                # std_msgs/String, once
    odometry: str = "/odom"                                       # nav_msgs/Odometry, 10 Hz
    command: str = "/navigation/command"                          # std_msgs/String per frame
    gt_path: str = "/ground_truth/path"                           # nav_msgs/Path, base_link
    gt_meta: str = "/ground_truth/meta"                           # std_msgs/String (JSON)


SIM_TOPICS = SimTopics()


def sim_camera_topics(name: str, topics: SimTopics = SIM_TOPICS) -> SimTopics:
    """The simulator topics with camera `name`'s image, compressed image, camera info and
    camera JSON (``/camera/<name>/...``; the front camera's are SIM_TOPICS' own)."""
    return replace(topics, image=f"/camera/{name}/image_raw",
                   compressed=f"/camera/{name}/image_raw/compressed",
                   camera_info=f"/camera/{name}/camera_info",
                   camera_json=f"/camera/{name}/camera_json")


def camera_frame(name: str) -> str:
    """The optical frame id of camera `name`'s images (CAMERA_FRAME for the front one)."""
    return f"camera_{name}_optical"

TYPES = {
    "image": "sensor_msgs/msg/Image",
    "compressed": "sensor_msgs/msg/CompressedImage",
    "camera_info": "sensor_msgs/msg/CameraInfo",
    "string": "std_msgs/msg/String",
    "odometry": "nav_msgs/msg/Odometry",
    "path": "nav_msgs/msg/Path",
    "markers": "visualization_msgs/msg/MarkerArray",
    "diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
}
CAMERA_TYPES = (TYPES["image"], TYPES["compressed"])

BASE_FRAME = "base_link"
ODOM_FRAME = "odom"
CAMERA_FRAME = "camera_front_optical"

# The JSON document on /ground_truth/meta: the data set's per-frame `meta` (docs/INTERFACES.md,
# "Generated data set") for every task merged into one object, plus "schema" and "stamp".
GT_SCHEMA = "wamdiff2/ground_truth/v1"


def node_input_remaps(node: str = NODE_NAME, topics: SimTopics = SIM_TOPICS,
                      compressed: bool = False, cameras: tuple[str, ...] = ("front",)
                      ) -> dict[str, str]:
    """Replay remaps from a simulator bag onto the planner node's inputs; with several
    `cameras` (a rig), each camera's topics onto ``~/input/<name>/image``."""
    suffix = "image/compressed" if compressed else "image"
    remaps = {}
    for name in cameras:
        own = topics if len(cameras) == 1 else sim_camera_topics(name, topics)
        target = f"/{node}/input/{suffix}" if len(cameras) == 1 else \
            f"/{node}/input/{name}/{suffix}"
        remaps[own.compressed if compressed else own.image] = target
    return {**remaps, topics.odometry: f"/{node}/input/odometry",
            topics.command: f"/{node}/input/command"}


@dataclass(frozen=True)
class OutputTopics:
    """Where the planner's results go (the node's output topics; `bag eval` writes the same
    names, plus per-frame stats and detections as JSON since vision_msgs is missing)."""

    node: str = NODE_NAME

    @property
    def path(self) -> str:
        return f"/{self.node}/output/path"

    @property
    def markers(self) -> str:
        return f"/{self.node}/output/markers"

    @property
    def status(self) -> str:
        """Where each Path came from (model, last_plan, stop): diagnostic_msgs/DiagnosticArray."""
        return f"/{self.node}/output/status"

    @property
    def detections(self) -> str:
        return f"/{self.node}/output/detections_json"

    @property
    def stats(self) -> str:
        return f"/{self.node}/output/stats"


def ground_truth_document(meta: dict, stamp_ns: int) -> str:
    """The /ground_truth/meta JSON text of one frame."""
    doc = {"schema": GT_SCHEMA, "stamp_ns": int(stamp_ns), **meta}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def parse_ground_truth(text: str) -> dict:
    """The meta dict of a /ground_truth/meta message; ValueError if it is not one."""
    from wamdiff2_core.user_files import parse_json

    doc = parse_json(text.encode(), "/ground_truth/meta", "message")   # ValueError
    if not isinstance(doc, dict) or doc.get("schema") != GT_SCHEMA:
        raise ValueError(f"not a {GT_SCHEMA} document")
    return doc
