"""ROS test fixtures: every test (or module, for shared nodes) gets its own ROS_DOMAIN_ID."""
from __future__ import annotations

import pytest

from ros_harness import domain_id


@pytest.fixture
def ros_domain(request) -> int:
    """A ROS_DOMAIN_ID of this test's own."""
    return domain_id(request.node.nodeid)


@pytest.fixture(scope="module")
def module_ros_domain(request) -> int:
    """A ROS_DOMAIN_ID shared by the tests of one module (one node process for them all)."""
    return domain_id(request.module.__name__)
