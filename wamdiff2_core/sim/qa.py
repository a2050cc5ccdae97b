"""Question-answer ground truth templated from the simulator state.

Every template has a fixed question and a closed set of answers. Distances are measured
along the lanes (following the road through bends, and through a junction along the
ego's route), centre to centre, so "ahead in our lane" means the same thing on a
straight motorway, a racetrack bend and an intersection approach. Only what lies ahead is
asked about: the camera looks forward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from wamdiff2_core.sim.expert import lane_chain

if TYPE_CHECKING:
    from wamdiff2_core.sim.world import World

LEAD_RANGE_M = 50.0
SIDE_RANGE_M = (2.0, 40.0)
CHAIN_LENGTH_M = 80.0


@dataclass(frozen=True)
class LaneFacts:
    """What the templates are filled from."""

    lead_distances: tuple[float, ...]       # vehicles ahead in our lane, sorted
    left_lane: bool
    right_lane: bool
    left_distances: tuple[float, ...]       # vehicles ahead in the adjacent left lane
    right_distances: tuple[float, ...]
    lane_rank: int                          # 0 = leftmost
    lane_count: int


@dataclass(frozen=True)
class QaItem:
    template: str
    question: str
    answer: str
    answer_set: tuple[str, ...]


def _along(network, chain, position: np.ndarray) -> float | None:
    """Arc length of ``position`` along a lane chain, or None when it is not on it."""
    for lane_index, start in chain:
        lane = network.get_lane(lane_index)
        s, r = lane.local_coordinates(position)
        lo = -math.inf if start == 0.0 else -0.5
        if lo <= s <= lane.length + 0.5 and abs(r) < lane.width_at(s) / 2:
            return start + s
    return None


def _distances_ahead(world: World, lane_index, lo: float, hi: float) -> tuple[float, ...]:
    network = world.road.network
    chain = lane_chain(network, lane_index, world.route_nodes, CHAIN_LENGTH_M + 200.0)
    ego_s = network.get_lane(lane_index).local_coordinates(world.ego.position)[0]
    found = []
    for vehicle in world.road.vehicles:
        if vehicle is world.ego:
            continue
        s = _along(network, chain, vehicle.position)
        if s is not None and lo < s - ego_s <= hi:
            found.append(round(float(s - ego_s), 3))
    return tuple(sorted(found))


def lane_facts(world: World) -> LaneFacts:
    """The facts about the ego's lane and its neighbours at the current instant."""
    network = world.road.network
    ego_index = world.ego.lane_index
    siblings = network.all_side_lanes(ego_index)
    # highway-env's lateral coordinate grows to the right: the ego sits at r > 0 in a lane
    # that lies to its left
    offsets = {tuple(index): network.get_lane(index).local_coordinates(world.ego.position)[1]
               for index in siblings}
    order = sorted(offsets, key=lambda index: -offsets[index])   # leftmost first
    rank = order.index(tuple(ego_index))
    left = order[rank - 1] if rank > 0 else None
    right = order[rank + 1] if rank + 1 < len(order) else None
    return LaneFacts(
        lead_distances=_distances_ahead(world, ego_index, 0.0, LEAD_RANGE_M),
        left_lane=left is not None, right_lane=right is not None,
        left_distances=_distances_ahead(world, left, *SIDE_RANGE_M) if left else (),
        right_distances=_distances_ahead(world, right, *SIDE_RANGE_M) if right else (),
        lane_rank=rank, lane_count=len(order))


_COUNT = ("none", "one", "two", "three or more")
_DISTANCE = ("no vehicle within 50 m", "closer than 15 m", "15 to 30 m", "30 to 50 m")
_FREE = ("yes", "no", "there is no such lane")
_LANE = ("the only lane", "the leftmost lane", "the rightmost lane", "a middle lane")


def _lead_count(facts: LaneFacts) -> QaItem:
    n = min(len(facts.lead_distances), 3)
    return QaItem("lead_count", "How many vehicles are ahead of us in our lane within 50 "
                  "metres?", _COUNT[n], _COUNT)


def _lead_distance(facts: LaneFacts) -> QaItem:
    if not facts.lead_distances:
        answer = _DISTANCE[0]
    else:
        d = facts.lead_distances[0]
        answer = _DISTANCE[1] if d < 15.0 else _DISTANCE[2] if d < 30.0 else _DISTANCE[3]
    return QaItem("lead_distance", "How far ahead is the nearest vehicle in our lane?",
                  answer, _DISTANCE)


def _side_free(side: str) -> Callable[[LaneFacts], QaItem]:
    def template(facts: LaneFacts) -> QaItem:
        exists = getattr(facts, f"{side}_lane")
        busy = getattr(facts, f"{side}_distances")
        answer = _FREE[2] if not exists else _FREE[1] if busy else _FREE[0]
        return QaItem(f"{side}_lane_free", f"Is the lane to our {side}, going our way, free "
                      "for the next 40 metres?", answer, _FREE)
    return template


def _ego_lane(facts: LaneFacts) -> QaItem:
    if facts.lane_count == 1:
        answer = _LANE[0]
    elif facts.lane_rank == 0:
        answer = _LANE[1]
    elif facts.lane_rank == facts.lane_count - 1:
        answer = _LANE[2]
    else:
        answer = _LANE[3]
    return QaItem("ego_lane", "Which lane are we driving in?", answer, _LANE)


TEMPLATES: dict[str, Callable[[LaneFacts], QaItem]] = {
    "lead_count": _lead_count,
    "lead_distance": _lead_distance,
    "left_lane_free": _side_free("left"),
    "right_lane_free": _side_free("right"),
    "ego_lane": _ego_lane,
}


def qa_item(world: World, rng: np.random.Generator) -> QaItem:
    """One question about the current instant, its template drawn with ``rng``."""
    names = sorted(TEMPLATES)
    return TEMPLATES[names[int(rng.integers(len(names)))]](lane_facts(world))
