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
