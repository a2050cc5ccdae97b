"""Camera QoS profiles by name (the `camera_qos` parameter).

`reliable` is the default because it is the one that delivers full-size frames here: with
Fast DDS's default transports a best-effort subscriber lost most 640x360 and 1280x720 RGB
frames (2-6 of 20 arrived), while a reliable subscriber with depth 1 received 20/20. Depth 1
keeps the reliable reader from queueing stale frames behind a slow planner. `sensor_data`
(best effort, keep last 5) suits small or compressed images, or a DDS tuned for large data
(for example `FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA`).
"""
from __future__ import annotations

from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)

CAMERA_QOS: dict[str, QoSProfile] = {
    "reliable": QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                           reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.VOLATILE),
    "sensor_data": qos_profile_sensor_data,
}

# Odometry, commands and questions: small messages; commands and questions must not be lost.
ODOMETRY_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                          reliability=ReliabilityPolicy.RELIABLE)
COMMAND_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                         reliability=ReliabilityPolicy.RELIABLE)
OUTPUT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10,
                        reliability=ReliabilityPolicy.RELIABLE)
