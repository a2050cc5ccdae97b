"""QA ground truth on hand-placed highway scenes."""
from __future__ import annotations

import numpy as np

from wamdiff2_core.sim.qa import TEMPLATES, lane_facts, qa_item
from wamdiff2_core.sim.world import World


def _place(world: World, placements):
    """Keep the ego and len(placements) vehicles, put them at (lane id offset, metres
    ahead) relative to the ego."""
    network = world.road.network
    ego = world.ego
    own = ego.lane_index
    s0 = network.get_lane(own).local_coordinates(ego.position)[0]
    others = [v for v in world.road.vehicles if v is not ego][:len(placements)]
    world.road.vehicles = [ego, *others]
    for vehicle, (lane_offset, ds) in zip(others, placements):
        lane = network.get_lane((*own[:2], own[2] + lane_offset))
        vehicle.position = lane.position(s0 + ds, 0.0)
        vehicle.heading = lane.heading_at(s0 + ds)
    return world


def _world(lanes_wanted: int, ego_lane: int) -> World:
    for seed in range(200):
        world = World("highway", seed)
        count = len(world.road.network.all_side_lanes(world.ego.lane_index))
        if count == lanes_wanted and world.ego.lane_index[2] == ego_lane:
            return world
    raise AssertionError("no such highway seed")


def _answers(world: World) -> dict[str, str]:
    facts = lane_facts(world)
    return {name: template(facts).answer for name, template in TEMPLATES.items()}


def test_answers_from_a_placed_scene():
    world = _place(_world(3, 1), [(0, 12.0), (0, 28.0), (-1, 20.0), (1, -20.0), (0, -15.0)])
    answers = _answers(world)
    assert answers == {
        "lead_count": "two",                 # the one behind does not count
        "lead_distance": "closer than 15 m",
        "left_lane_free": "no",
        "right_lane_free": "yes",            # its only vehicle is behind us
        "ego_lane": "a middle lane",
    }


def test_edge_lanes_and_empty_road():
    answers = _answers(_place(_world(2, 0), []))
    assert answers["lead_count"] == "none"
    assert answers["lead_distance"] == "no vehicle within 50 m"
    assert answers["left_lane_free"] == "there is no such lane"
    assert answers["right_lane_free"] == "yes"
    assert answers["ego_lane"] == "the leftmost lane"
    answers = _answers(_place(_world(2, 1), [(0, 40.0), (0, 70.0)]))
    assert answers["ego_lane"] == "the rightmost lane"
    assert answers["lead_count"] == "one" and answers["lead_distance"] == "30 to 50 m"
    assert answers["right_lane_free"] == "there is no such lane"


def test_every_answer_is_in_its_closed_set_across_scenarios():
    rng = np.random.default_rng(0)
    for scenario in ("highway", "intersection", "racetrack"):
        world = World(scenario, 5)
        for step in range(60):
            world.step()
            if step % 10 == 0:
                facts = lane_facts(world)
                for template in TEMPLATES.values():
                    item = template(facts)
                    assert item.answer in item.answer_set
                drawn = qa_item(world, rng)
                assert drawn.template in TEMPLATES and drawn.answer in drawn.answer_set
