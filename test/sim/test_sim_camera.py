"""Panda3D camera, id pass and detection boxes on a hand-placed highway scene."""
from __future__ import annotations

import numpy as np
import pytest

from wamdiff2_core.sim.camera import CameraConfig, box_points, parse_resolution, projected_box
from wamdiff2_core.sim.detection import DetectionConfig, boxes_from_ids
from wamdiff2_core.sim.renderer import CameraRenderer, decode_ids, encode_id
from wamdiff2_core.sim.world import World

CAMERA = CameraConfig()
TOL = 1.5   # pixels


def _scene():
    """Ego in a middle lane; A 15 m ahead in the ego's lane, B 35 m ahead right behind A
    (hidden), C 35 m ahead in the next lane (visible)."""
    world = World("highway", 0)
    network = world.road.network
    ego = world.ego
    lanes = network.all_side_lanes(ego.lane_index)
    own = ego.lane_index
    side = (*own[:2], own[2] + 1 if own[2] + 1 < len(lanes) else own[2] - 1)
    s0 = network.get_lane(own).local_coordinates(ego.position)[0]
    others = [v for v in world.road.vehicles if v is not ego][:3]
    world.road.vehicles = [ego, *others]
    for vehicle, (lane_index, ds) in zip(others, [(own, 15.0), (own, 35.0), (side, 35.0)]):
        lane = network.get_lane(lane_index)
        vehicle.position = lane.position(s0 + ds, 0.0)
        vehicle.heading = lane.heading_at(s0 + ds)
    ego.position = network.get_lane(own).position(s0, 0.0)
    ego.heading = network.get_lane(own).heading_at(s0)
    a, b, c = (world.agent_state(v) for v in others)
    return world, a, b, c


@pytest.fixture(scope="module")
def scene():
    world, a, b, c = _scene()
    with CameraRenderer(CAMERA, world.lanes) as renderer:
        frame = renderer.render(world.ego_state(), world.others())
        without_a = renderer.render(world.ego_state(), [s for s in world.others() if s != a])
        again = renderer.render(world.ego_state(), world.others())
    return world, (a, b, c), frame, without_a, again


def test_rendering_is_deterministic_and_shaped(scene):
    _, _, frame, _, again = scene
    assert frame.rgb.shape == (CAMERA.height, CAMERA.width, 3) and frame.rgb.dtype == np.uint8
    assert np.array_equal(frame.rgb, again.rgb) and np.array_equal(frame.ids, again.ids)
    assert len(np.unique(frame.rgb.reshape(-1, 3), axis=0)) > 4   # sky, grass, road, cars


def test_hidden_vehicle_gets_no_box(scene):
    _, (a, b, c), frame, without_a, _ = scene
    ids = {box.id for box in boxes_from_ids(frame.ids)}
    assert a.id in ids and c.id in ids
    assert b.id not in ids and not (frame.ids == b.id).any()
    # B is in view: with A gone it is seen and boxed
    assert b.id in {box.id for box in boxes_from_ids(without_a.ids)}


def test_boxes_lie_on_their_vehicles(scene):
    world, _, frame, without_a, _ = scene
    ego = world.ego_state()
    for image in (frame, without_a):
        boxes = boxes_from_ids(image.ids)
        assert boxes
        for box in boxes:
            agent = next(s for s in world.others() if s.id == box.id)
            projected = projected_box(CAMERA, ego.xy, ego.yaw, box_points(
                agent.x, agent.y, agent.yaw, agent.length, agent.width))
            assert projected is not None
            x1, y1, x2, y2 = box.box
            # within the exact projection, up to rasterisation (a pixel counts when the
            # software renderer covers it, about +-1 px at the edges)
            assert x1 >= projected[0] - TOL and y1 >= projected[1] - TOL
            assert x2 <= projected[2] + TOL and y2 <= projected[3] + TOL
            # the unoccluded front vehicle fills its projected box
            inner = image.ids[int(y1):int(y2), int(x1):int(x2)]
            assert (inner == box.id).mean() > 0.5
            assert 0 <= x1 < x2 <= CAMERA.width and 0 <= y1 < y2 <= CAMERA.height


def test_tiny_boxes_are_dropped():
    ids = np.full((40, 60), -1, dtype=np.int32)
    ids[10:13, 10:30] = 4        # 3 px tall
    ids[20:30, 40:50] = 5
    boxes = boxes_from_ids(ids, DetectionConfig(min_side_px=4.0, min_pixels=12))
    assert [(b.id, b.box) for b in boxes] == [(5, (40.0, 20.0, 50.0, 30.0))]


def test_id_colours_round_trip():
    ids = np.array([0, 1, 62, 63, 64, 1000, 4000])
    colours = np.array([[round(c * 255) for c in encode_id(int(i))[:3]] for i in ids])
    # the software renderer may be off by one level: decoding must not care
    for jitter in (-1, 0, 1):
        decoded = decode_ids(np.clip(colours + jitter, 0, 255).astype(np.uint8)[None])
        assert decoded[0].tolist() == ids.tolist()
    assert decode_ids(np.zeros((1, 1, 3), np.uint8))[0, 0] == -1


def test_intrinsics_and_resolution():
    camera = CameraConfig(width=640, height=360, hfov_deg=90.0)
    fx, fy, cx, cy = camera.intrinsics
    assert fx == pytest.approx(320.0) and fy == fx and (cx, cy) == (320.0, 180.0)
    assert camera.to_json()["fx"] == pytest.approx(320.0)
    assert parse_resolution("320x180") == (320, 180)
    with pytest.raises(ValueError):
        parse_resolution("320")


def test_off_centre_principal_point_matches_projection():
    """The Panda3D lens honours cx, cy and fx != fy like the numpy projection."""
    world, a, _, _ = _scene()
    camera = CameraConfig(width=200, height=120, fx=150.0, fy=120.0, cx=90.0, cy=70.0)
    ego = world.ego_state()
    with CameraRenderer(camera, world.lanes) as renderer:
        frame = renderer.render(ego, [a])
    rows, cols = np.nonzero(frame.ids == a.id)
    projected = projected_box(camera, ego.xy, ego.yaw,
                              box_points(a.x, a.y, a.yaw, a.length, a.width))
    assert abs(cols.min() - projected[0]) <= TOL and abs(cols.max() + 1 - projected[2]) <= TOL
    assert abs(rows.min() - projected[1]) <= TOL and abs(rows.max() + 1 - projected[3]) <= TOL
