"""Shared by the bag tests: a small recording configuration and domain ids."""
from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

from wamdiff2_ros.tools.bag_record import RecordConfig

# Two short episodes at a small resolution: every topic, a few seconds to record.
SMALL = RecordConfig(episodes=2, frames=2, scenarios=("highway", "intersection"), width=64,
                     height=36)


def domain_id(key: str) -> int:
    """A ROS_DOMAIN_ID in 1..101 from `key` and this process id (no test sees another's)."""
    return 1 + zlib.crc32(f"bags:{key}:{os.getpid()}".encode()) % 101


# The installed console script (`python -m wamdiff2_core.cli` would load the CLI module twice).
WAMDIFF2 = str(Path(sys.executable).parent / "wamdiff2")
