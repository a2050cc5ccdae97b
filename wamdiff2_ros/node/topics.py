"""The node's topic names, relative so that launch files can remap them."""
from __future__ import annotations

from sensor_msgs.msg import CompressedImage, Image

from wamdiff2_ros.node.params import NodeConfig

ODOMETRY_TOPIC = "~/input/odometry"
COMMAND_TOPIC = "~/input/command"
QUESTION_TOPIC = "~/input/question"
PATH_TOPIC = "~/output/path"
MARKERS_TOPIC = "~/output/markers"
DETECTIONS_TOPIC = "~/output/detections"
ANSWER_TOPIC = "~/output/answer"
STATUS_TOPIC = "~/output/status"
STATS_TOPIC = "~/output/stats"
# sensor_msgs/PointCloud2: every candidate plan's waypoints and score (node/candidates.py)
CANDIDATES_TOPIC = "~/output/candidates"
CANDIDATE_MARKERS_TOPIC = "~/output/candidates/markers"
# std_msgs/Float64 (Jazzy's wheels have no stamped float such as Autoware's Float64Stamped)
PROCESSING_TIME_TOPIC = "~/debug/processing_time_ms"
DIAGNOSTICS_TOPIC = "/diagnostics"


def camera_topics(config: NodeConfig) -> list[tuple[type, str]]:
    """(message type, topic) per camera, trigger camera first.

    One camera: ~/input/image (raw) or ~/input/image/compressed; several:
    ~/input/<name>/image[/compressed].
    """
    msg_type = Image if config.image_transport == "raw" else CompressedImage
    suffix = "image" if config.image_transport == "raw" else "image/compressed"
    if len(config.cameras) == 1:
        return [(msg_type, f"~/input/{suffix}")]
    return [(msg_type, f"~/input/{name}/{suffix}") for name in config.cameras]


def parse_camera_topics(text: str) -> list[tuple[str, str]]:
    """(camera name, topic) pairs of "front:=/cam_f/image_raw,left:=/cam_l/image_raw" (the
    launch file's `camera_topics`, `bag eval --camera-topics`). ValueError (one sentence)
    for an item that is not NAME:=TOPIC, a name given twice, or nothing at all."""
    pairs: list[tuple[str, str]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, topic = (part.strip() for part in item.partition(":="))
        if not sep or not name or not topic:
            raise ValueError(f"camera topics: {item!r} is not NAME:=TOPIC (e.g. "
                             f"front:=/cam_f/image_raw,left:=/cam_l/image_raw)")
        if name in dict(pairs):
            raise ValueError(f"camera topics name camera {name!r} twice")
        pairs.append((name, topic))
    if not pairs:
        raise ValueError("camera topics: none given (NAME:=TOPIC,NAME:=TOPIC)")
    return pairs
