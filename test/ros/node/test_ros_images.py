"""Image and CompressedImage -> RGB: every encoding, row padding, byte order, bad input."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import CompressedImage, Image

from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.node.images import ENCODINGS, compressed_to_rgb, image_to_rgb


def _rgb(h: int = 6, w: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _msg(pixels: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False) -> Image:
    """An Image of `pixels` (H, W, C) in their own dtype, each row followed by `pad` bytes."""
    h, w = pixels.shape[:2]
    if pixels.dtype == np.uint16:
        pixels = pixels.astype(">u2" if bigendian else "<u2")
    rows = pixels.reshape(h, -1).view(np.uint8)                        # (H, row_bytes)
    padded = np.concatenate([rows, np.full((h, pad), 0xAB, np.uint8)], axis=1)
    return Image(height=h, width=w, encoding=encoding, is_bigendian=int(bigendian),
                 step=padded.shape[1], data=padded.tobytes())


def _alpha(rgb: np.ndarray) -> np.ndarray:
    return np.full(rgb.shape[:2] + (1,), 200, rgb.dtype)


# encoding -> (RGB -> pixels in that encoding, exact expected RGB from the original)
DIRECT = {
    "rgb8": (lambda a: a, lambda a: a),
    "bgr8": (lambda a: a[..., ::-1], lambda a: a),
    "8UC3": (lambda a: a[..., ::-1], lambda a: a),
    "rgba8": (lambda a: np.concatenate([a, _alpha(a)], 2), lambda a: a),
    "bgra8": (lambda a: np.concatenate([a[..., ::-1], _alpha(a)], 2), lambda a: a),
    "8UC4": (lambda a: np.concatenate([a[..., ::-1], _alpha(a)], 2), lambda a: a),
    "mono8": (lambda a: a[..., :1], lambda a: np.repeat(a[..., :1], 3, 2)),
    "8UC1": (lambda a: a[..., :1], lambda a: np.repeat(a[..., :1], 3, 2)),
    "rgb16": (lambda a: a.astype(np.uint16) * 257, lambda a: a),
    "bgr16": (lambda a: a[..., ::-1].astype(np.uint16) * 257, lambda a: a),
    "16UC3": (lambda a: a[..., ::-1].astype(np.uint16) * 257, lambda a: a),
    "rgba16": (lambda a: np.concatenate([a, _alpha(a)], 2).astype(np.uint16) * 257,
               lambda a: a),
    "bgra16": (lambda a: np.concatenate([a[..., ::-1], _alpha(a)], 2).astype(np.uint16) * 257,
               lambda a: a),
    "16UC4": (lambda a: np.concatenate([a[..., ::-1], _alpha(a)], 2).astype(np.uint16) * 257,
              lambda a: a),
    "mono16": (lambda a: a[..., :1].astype(np.uint16) * 257,
               lambda a: np.repeat(a[..., :1], 3, 2)),
    "16UC1": (lambda a: a[..., :1].astype(np.uint16) * 257,
              lambda a: np.repeat(a[..., :1], 3, 2)),
}


@pytest.mark.parametrize("encoding", sorted(DIRECT))
@pytest.mark.parametrize("pad", [0, 5])
@pytest.mark.parametrize("bigendian", [False, True])
def test_direct_encodings_are_exact(encoding, pad, bigendian):
    rgb = _rgb()
    encode, expected = DIRECT[encoding]
    out = image_to_rgb(_msg(encode(rgb), encoding, pad, bigendian))
    assert out.dtype == np.uint8 and out.shape == rgb.shape and out.flags.c_contiguous
    np.testing.assert_array_equal(out, expected(rgb))


def test_byte_order_matters_for_16_bit_data():
    pixels = np.full((2, 2, 1), 0x1280, np.uint16)                     # high byte 0x12
    little = image_to_rgb(_msg(pixels, "mono16", bigendian=False))
    assert little[0, 0, 0] == 0x12
    wrong = _msg(pixels, "mono16", bigendian=False)
    wrong.is_bigendian = 1                                              # lie about it
    assert image_to_rgb(wrong)[0, 0, 0] == 0x80


@pytest.mark.parametrize("pattern", ["rggb", "bggr", "gbrg", "grbg"])
@pytest.mark.parametrize("bits", [8, 16])
def test_bayer_patterns_demosaic_to_the_right_colour(pattern, bits):
    colour = {"r": 200, "g": 120, "b": 40}
    h, w = 8, 8
    mosaic = np.zeros((h, w), np.uint16 if bits == 16 else np.uint8)
    scale = 257 if bits == 16 else 1
    for dy in range(2):
        for dx in range(2):
            mosaic[dy::2, dx::2] = colour[pattern[2 * dy + dx]] * scale
    out = image_to_rgb(_msg(mosaic[..., None], f"bayer_{pattern}{bits}", pad=3))
    np.testing.assert_allclose(out[2:-2, 2:-2].reshape(-1, 3).mean(0),
                               [colour["r"], colour["g"], colour["b"]], atol=2)


@pytest.mark.parametrize("encoding,order", [("yuv422", "uyvy"), ("uyvy", "uyvy"),
                                            ("yuv422_yuy2", "yuyv"), ("yuyv", "yuyv")])
def test_packed_yuv422(encoding, order):
    r, g, b = 180, 60, 90
    # BT.601 video range, the convention of 4:2:2 camera streams.
    y = round(16 + 0.257 * r + 0.504 * g + 0.098 * b)
    u = round(128 - 0.148 * r - 0.291 * g + 0.439 * b)
    v = round(128 + 0.439 * r - 0.368 * g - 0.071 * b)
    packed = np.zeros((4, 6, 2), np.uint8)
    luma, chroma = (1, 0) if order == "uyvy" else (0, 1)
    packed[..., luma] = y
    packed[:, ::2, chroma], packed[:, 1::2, chroma] = u, v
    out = image_to_rgb(_msg(packed, encoding, pad=4))
    np.testing.assert_allclose(out.reshape(-1, 3).mean(0), (r, g, b), atol=3)


@settings(max_examples=60, deadline=None)
@given(h=st.integers(1, 12), w=st.integers(1, 12), pad=st.integers(0, 9),
       encoding=st.sampled_from(sorted(DIRECT)), bigendian=st.booleans(),
       extra=st.integers(0, 7), seed=st.integers(0, 2**16))
def test_any_size_padding_and_trailing_bytes(h, w, pad, encoding, bigendian, extra, seed):
    rgb = _rgb(h, w, seed)
    encode, expected = DIRECT[encoding]
    msg = _msg(encode(rgb), encoding, pad, bigendian)
    msg.data = bytes(msg.data) + b"\x00" * extra                       # longer is fine
    np.testing.assert_array_equal(image_to_rgb(msg), expected(rgb))


def test_last_row_without_padding_is_accepted():
    rgb = _rgb(3, 4)
    msg = _msg(rgb, "rgb8", pad=6)
    msg.data = bytes(msg.data)[:-6]                    # the final row's padding is missing
    np.testing.assert_array_equal(image_to_rgb(msg), rgb)


@pytest.mark.parametrize("mutate,kind", [
    (lambda m: setattr(m, "encoding", "weird16"), "image_encoding"),
    (lambda m: setattr(m, "encoding", "32FC1"), "image_encoding"),
    (lambda m: setattr(m, "step", m.width * 3 - 1), "image_step"),
    (lambda m: setattr(m, "step", 0), "image_step"),
    (lambda m: setattr(m, "data", bytes(m.data)[:-1]), "image_data_short"),
    (lambda m: setattr(m, "data", b""), "image_data_short"),
    (lambda m: setattr(m, "height", m.height * 2), "image_data_short"),
    (lambda m: setattr(m, "width", 0), "image_size"),
    (lambda m: setattr(m, "height", 0), "image_size"),
])
def test_bad_raw_images_raise_bad_input(mutate, kind):
    msg = _msg(_rgb(4, 6), "rgb8")
    mutate(msg)
    with pytest.raises(BadInput) as info:
        image_to_rgb(msg)
    assert info.value.kind == kind and str(info.value)


def test_yuv422_needs_an_even_width():
    msg = Image(height=2, width=3, encoding="yuv422", step=6, data=bytes(12))
    with pytest.raises(BadInput, match="even width"):
        image_to_rgb(msg)


def test_every_registered_encoding_decodes_a_buffer_of_its_size():
    for name, enc in ENCODINGS.items():
        row = 4 * enc.channels * enc.sample_bytes
        out = image_to_rgb(Image(height=4, width=4, encoding=name, step=row,
                                 data=bytes(row * 4)))
        assert out.shape == (4, 4, 3), name


def _compressed(data: bytes, fmt: str = "jpeg") -> CompressedImage:
    return CompressedImage(format=fmt, data=data)


def test_jpeg_and_png_decode_to_rgb():
    rgb = np.zeros((32, 48, 3), np.uint8)
    rgb[:, :16] = (255, 0, 0)
    rgb[:, 32:] = (0, 0, 255)
    bgr = rgb[..., ::-1]
    ok, png = cv2.imencode(".png", bgr)
    np.testing.assert_array_equal(compressed_to_rgb(_compressed(png.tobytes(), "png")), rgb)
    ok, jpg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 95])
    out = compressed_to_rgb(_compressed(jpg.tobytes(), "rgb8; jpeg compressed bgr8"))
    assert out.shape == rgb.shape
    assert out[16, 4, 0] > 200 and out[16, 4, 2] < 50                 # red stays red
    assert out[16, 44, 2] > 200 and out[16, 44, 0] < 50               # blue stays blue


def test_jpeg_with_trailing_zero_padding_is_accepted():
    ok, jpg = cv2.imencode(".jpg", np.full((16, 16, 3), 128, np.uint8))
    assert compressed_to_rgb(_compressed(jpg.tobytes() + b"\x00" * 16)).shape == (16, 16, 3)


@pytest.mark.parametrize("make,kind", [
    (lambda jpg: _compressed(b""), "compressed_empty"),
    (lambda jpg: _compressed(jpg[: len(jpg) // 2]), "compressed_corrupt"),
    (lambda jpg: _compressed(bytes(range(256)) * 4), "compressed_corrupt"),
    (lambda jpg: _compressed(b"\xff\xd8\xff" + b"\x00" * 64 + b"\xff\xd9"),
     "compressed_corrupt"),
    (lambda jpg: _compressed(jpg, "16UC1; compressedDepth png"), "compressed_format"),
])
def test_bad_compressed_images_raise_bad_input(make, kind):
    ok, jpg = cv2.imencode(".jpg", _rgb(32, 32))
    with pytest.raises(BadInput) as info:
        compressed_to_rgb(make(jpg.tobytes()))
    assert info.value.kind == kind
