"""Bag test fixtures: a small simulator bag, and a ROS_DOMAIN_ID of each test's own."""
from __future__ import annotations

from pathlib import Path

import pytest
from bag_fixtures import SMALL, domain_id

from wamdiff2_ros.tools.bag_record import record_sim


@pytest.fixture
def ros_domain(request) -> int:
    return domain_id(request.node.nodeid)


@pytest.fixture(scope="session")
def small_bag(tmp_path_factory) -> Path:
    """A recorded SMALL bag (a single .mcap file), shared read-only by the session."""
    out = tmp_path_factory.mktemp("small") / "small.mcap"
    record_sim(out, SMALL, progress=False)
    return out
