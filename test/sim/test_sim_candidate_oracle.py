"""The privileged oracle: the expert's own plan scores (nearly) full marks, a plan off the
road or one that stands still scores what PDMS says, and the world is left as it was."""
import numpy as np
import pytest

from wamdiff2_core.sim.candidate_oracle import oracle_outcomes
from wamdiff2_core.sim.world import World


@pytest.fixture(scope="module")
def world():
    w = World("racetrack", 7, ego="controlled")
    for _ in range(10):
        w.step((0.0, 0.0))
    return w


def test_oracle_scores_follow_the_pdms_terms(world):
    expert, _ = world.expert_plan()
    speed = world.ego_state().speed
    straight_on = np.stack([speed * np.arange(1, 9) * 0.5, np.zeros(8)], axis=1)
    off_road = expert + np.array([0.0, 12.0]) * np.linspace(0.2, 1.0, 8)[:, None]
    standing = np.zeros((8, 2))
    before = (world.time, world.ego_state(), [v.position.copy() for v in world.road.vehicles])
    good, off, stand, straight = oracle_outcomes(
        world, np.stack([expert, off_road, standing, straight_on]), expert)
    assert good.score > 0.95 and good.nc == good.dac == 1.0
    assert off.dac == 0.0 and off.score == 0.0
    assert stand.ep < 0.6 and stand.score < good.score
    assert 0.0 <= straight.score <= 1.0
    assert (world.time, world.ego_state()) == before[:2]
    assert all(np.array_equal(v.position, p) for v, p in zip(world.road.vehicles, before[2]))
