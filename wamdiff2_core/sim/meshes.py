"""Panda3D geometry for the camera: ground strips, lane pieces and unit boxes."""
from __future__ import annotations

import numpy as np

_STRIPED, _CONTINUOUS, _CONTINUOUS_LINE = 1, 2, 3   # highway-env LineType values

# (normal, four corners) of the unit box [-0.5, 0.5] x [-0.5, 0.5] x [0, 1]
_BOX_FACES = (
    ((1, 0, 0), ((0.5, -0.5, 0), (0.5, 0.5, 0), (0.5, 0.5, 1), (0.5, -0.5, 1))),
    ((-1, 0, 0), ((-0.5, 0.5, 0), (-0.5, -0.5, 0), (-0.5, -0.5, 1), (-0.5, 0.5, 1))),
    ((0, 1, 0), ((0.5, 0.5, 0), (-0.5, 0.5, 0), (-0.5, 0.5, 1), (0.5, 0.5, 1))),
    ((0, -1, 0), ((-0.5, -0.5, 0), (0.5, -0.5, 0), (0.5, -0.5, 1), (-0.5, -0.5, 1))),
    ((0, 0, 1), ((-0.5, -0.5, 1), (0.5, -0.5, 1), (0.5, 0.5, 1), (-0.5, 0.5, 1))),
    ((0, 0, -1), ((-0.5, 0.5, 0), (0.5, 0.5, 0), (0.5, -0.5, 0), (-0.5, -0.5, 0))),
)


# Flat shading baked into vertex colours (no lights: exact, fast, deterministic): the
# brightness of a face by its normal's dominant axis.
_SHADE = {(0, 0, 1): 1.0, (0, 0, -1): 0.45, (1, 0, 0): 0.85, (-1, 0, 0): 0.8,
          (0, 1, 0): 0.68, (0, -1, 0): 0.62}


def _geom_node(name: str, quads: list[tuple[tuple, tuple]], colour, lit: bool):
    """A GeomNode of quads, each given as (normal, four (x, y, z) corners); ``lit`` quads
    are shaded by their normal, the others keep ``colour`` exactly."""
    from panda3d.core import (Geom, GeomNode, GeomTriangles, GeomVertexData,
                              GeomVertexFormat, GeomVertexWriter)

    data = GeomVertexData(name, GeomVertexFormat.get_v3c4(), Geom.UH_static)
    data.unclean_set_num_rows(4 * len(quads))
    vertex = GeomVertexWriter(data, "vertex")
    color = GeomVertexWriter(data, "color")
    triangles = GeomTriangles(Geom.UH_static)
    for index, (quad_normal, corners) in enumerate(quads):
        shade = _SHADE.get(tuple(quad_normal), 1.0) if lit else 1.0
        rgba = (colour[0] * shade, colour[1] * shade, colour[2] * shade, colour[3])
        for corner in corners:
            vertex.add_data3(*corner)
            color.add_data4(*rgba)
        base = 4 * index
        triangles.add_vertices(base, base + 1, base + 2)
        triangles.add_vertices(base, base + 2, base + 3)
    geom = Geom(data)
    geom.add_primitive(triangles)
    node = GeomNode(name)
    node.add_geom(geom)
    return node


def box_node(name: str, colour, lit: bool):
    """A unit box (1 x 1 x 1, base on z = 0, centred in x and y) of one colour.

    Scale it by (length, width, height); flat shading comes from per-face normals.
    """
    return _geom_node(name, list(_BOX_FACES), colour, lit)


def quad_strip_node(name: str, left: np.ndarray, right: np.ndarray, colour):
    """A flat strip on the ground between two polylines (N, 2) sampled at matching
    points."""
    quads = []
    for i in range(len(left) - 1):
        corners = (left[i], right[i], right[i + 1], left[i + 1])
        quads.append(((0, 0, 1), tuple((float(x), float(y), 0.0) for x, y in corners)))
    return _geom_node(name, quads, colour, lit=True)


def _samples(start: float, end: float, step: float) -> np.ndarray:
    count = max(1, int(np.ceil((end - start) / step)))
    return np.linspace(start, end, count + 1)


def _marking_quads(lane, start: float, end: float, step: float, side: float,
                   line_type: int, width: float, dash: float, gap: float) -> list:
    """Quads of one lane border (side: +1 left, -1 right) between ``start`` and ``end``."""
    if line_type not in (_STRIPED, _CONTINUOUS, _CONTINUOUS_LINE):
        return []
    if line_type == _STRIPED:
        period = dash + gap
        first = np.floor(start / period) * period
        pieces = [(max(s0, start), min(s0 + dash, end))
                  for s0 in np.arange(first, end, period) if s0 + dash > start]
    else:
        pieces = [(start, end)]
    quads = []
    offset = side * lane.width / 2
    for s0, s1 in pieces:
        if s1 - s0 < 1e-6:
            continue
        s = _samples(s0, s1, step)
        inner = lane.points(s, offset - side * width / 2)
        outer = lane.points(s, offset + side * width / 2)
        for i in range(len(s) - 1):
            corners = (inner[i], outer[i], outer[i + 1], inner[i + 1])
            quads.append(((0, 0, 1), tuple((float(x), float(y), 0.0) for x, y in corners)))
    return quads


def lane_chunk_nodes(lane, start: float, end: float, step: float, marking_width: float,
                     dash: float, gap: float, asphalt, marking):
    """The road surface and the markings (or None) of one lane between two arc lengths."""
    s = _samples(start, end, step)
    surface = quad_strip_node("road", lane.points(s, lane.width / 2),
                              lane.points(s, -lane.width / 2), asphalt)
    quads = (_marking_quads(lane, start, end, step, +1.0, lane.left_line, marking_width,
                            dash, gap)
             + _marking_quads(lane, start, end, step, -1.0, lane.right_line, marking_width,
                              dash, gap))
    markings = _geom_node("markings", quads, marking, lit=True) if quads else None
    return surface, markings
