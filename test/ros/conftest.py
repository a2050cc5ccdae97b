"""ROS test fixtures: every test (or module, for shared nodes) gets its own ROS_DOMAIN_ID."""
from __future__ import annotations

import os
import zlib

import pytest


def domain_id(key: str) -> int:
    """A ROS_DOMAIN_ID in 1..101 derived from `key` and this process id.

    Different tests get different domains, and so do two test runs on one machine (their
    pids differ), so no test ever sees another's nodes.
    """
    return 1 + zlib.crc32(f"{key}:{os.getpid()}".encode()) % 101


@pytest.fixture
def ros_domain(request) -> int:
    """A ROS_DOMAIN_ID of this test's own."""
    return domain_id(request.node.nodeid)


@pytest.fixture(scope="module")
def module_ros_domain(request) -> int:
    """A ROS_DOMAIN_ID shared by the tests of one module (one node process for them all)."""
    return domain_id(request.module.__name__)
