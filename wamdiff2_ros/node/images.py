"""sensor_msgs/Image and CompressedImage -> RGB arrays, without cv_bridge.

Both functions return a C-contiguous (H, W, 3) uint8 RGB array or raise `BadInput`; they
never return a partial or garbage frame. Raw images honour `step` (row padding) and
`is_bigendian` (16-bit samples); 16-bit data keeps its 8 most significant bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np

from wamdiff2_ros.node.bad_input import BadInput

ToRgb = Callable[[np.ndarray], np.ndarray]   # (H, W, C) uint8 -> (H, W, 3) uint8 RGB


@dataclass(frozen=True)
class RawEncoding:
    """How one `encoding` string lays out a pixel."""

    channels: int        # samples per pixel
    sample_bytes: int    # 1 or 2
    to_rgb: ToRgb


def _cvt(code: int) -> ToRgb:
    return lambda a: cv2.cvtColor(a, code)


def _drop_alpha_rgb(a: np.ndarray) -> np.ndarray:
    return a[..., :3]


def _bgr(a: np.ndarray) -> np.ndarray:
    return a[..., 2::-1]


def _mono(a: np.ndarray) -> np.ndarray:
    return np.repeat(a, 3, axis=2)


# ROS bayer_<pattern> names the colours of the top-left 2x2 block; OpenCV's (pre-5.x) names
# the second row's middle pair, hence rggb -> BG (the mapping cv_bridge uses).
_BAYER = {"rggb": cv2.COLOR_BayerBG2RGB, "bggr": cv2.COLOR_BayerRG2RGB,
          "gbrg": cv2.COLOR_BayerGR2RGB, "grbg": cv2.COLOR_BayerGB2RGB}


def _bayer(code: int) -> ToRgb:
    return lambda a: cv2.cvtColor(a[..., 0], code)


ENCODINGS: dict[str, RawEncoding] = {
    "rgb8": RawEncoding(3, 1, lambda a: a),
    "rgba8": RawEncoding(4, 1, _drop_alpha_rgb),
    "bgr8": RawEncoding(3, 1, _bgr),
    "bgra8": RawEncoding(4, 1, _bgr),
    "mono8": RawEncoding(1, 1, _mono),
    "rgb16": RawEncoding(3, 2, lambda a: a),
    "rgba16": RawEncoding(4, 2, _drop_alpha_rgb),
    "bgr16": RawEncoding(3, 2, _bgr),
    "bgra16": RawEncoding(4, 2, _bgr),
    "mono16": RawEncoding(1, 2, _mono),
    # OpenCV type names: cv_bridge reads 3/4-channel ones as BGR(A).
    "8UC1": RawEncoding(1, 1, _mono),
    "8UC3": RawEncoding(3, 1, _bgr),
    "8UC4": RawEncoding(4, 1, _bgr),
    "16UC1": RawEncoding(1, 2, _mono),
    "16UC3": RawEncoding(3, 2, _bgr),
    "16UC4": RawEncoding(4, 2, _bgr),
    # Packed 4:2:2 YUV, 2 bytes per pixel: UYVY (`yuv422`) and YUYV (`yuv422_yuy2`).
    "yuv422": RawEncoding(2, 1, _cvt(cv2.COLOR_YUV2RGB_UYVY)),
    "uyvy": RawEncoding(2, 1, _cvt(cv2.COLOR_YUV2RGB_UYVY)),
    "yuv422_yuy2": RawEncoding(2, 1, _cvt(cv2.COLOR_YUV2RGB_YUY2)),
    "yuyv": RawEncoding(2, 1, _cvt(cv2.COLOR_YUV2RGB_YUY2)),
    **{f"bayer_{p}8": RawEncoding(1, 1, _bayer(code)) for p, code in _BAYER.items()},
    **{f"bayer_{p}16": RawEncoding(1, 2, _bayer(code)) for p, code in _BAYER.items()},
}


def _lookup(encoding: str) -> RawEncoding:
    enc = ENCODINGS.get(encoding) or ENCODINGS.get(encoding.lower())
    if enc is None:
        raise BadInput("image_encoding",
                       f"unsupported image encoding {encoding!r} "
                       f"(supported: {', '.join(sorted(ENCODINGS))})")
    return enc


def image_to_rgb(msg) -> np.ndarray:
    """A sensor_msgs/Image as an (H, W, 3) uint8 RGB array.

    Raises BadInput for an unknown encoding, a zero size, a `step` smaller than one row,
    data shorter than `step * height`, or an odd width with a 4:2:2 YUV encoding.
    """
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise BadInput("image_size", f"image has no pixels ({width}x{height})")
    enc = _lookup(msg.encoding)
    if enc.channels == 2 and width % 2:
        raise BadInput("image_size", f"{msg.encoding} needs an even width, got {width}")
    row_bytes = width * enc.channels * enc.sample_bytes
    if step < row_bytes:
        raise BadInput("image_step", f"step {step} is smaller than one row of {width} "
                                     f"{msg.encoding} pixels ({row_bytes} bytes)")
    data = np.frombuffer(memoryview(msg.data).cast("B"), dtype=np.uint8)
    needed = step * (height - 1) + row_bytes
    if data.size < needed:
        raise BadInput("image_data_short", f"data has {data.size} bytes, {width}x{height} "
                                           f"{msg.encoding} with step {step} needs {needed}")
    rows = np.lib.stride_tricks.as_strided(data, shape=(height, row_bytes), strides=(step, 1))
    rows = np.ascontiguousarray(rows)                                  # (H, row_bytes)
    if enc.sample_bytes == 2:
        samples = rows.view(">u2" if msg.is_bigendian else "<u2")      # (H, W*C)
        rows = (samples >> 8).astype(np.uint8)
    pixels = rows.reshape(height, width, enc.channels)                 # (H, W, C) uint8
    return np.ascontiguousarray(enc.to_rgb(pixels))


_JPEG_SOI, _JPEG_EOI = b"\xff\xd8", b"\xff\xd9"


def compressed_to_rgb(msg) -> np.ndarray:
    """A sensor_msgs/CompressedImage (JPEG, PNG, anything OpenCV decodes) as RGB uint8.

    Raises BadInput for empty data, compressedDepth (not a camera image), a JPEG without its
    end-of-image marker (truncated in transit), or data OpenCV cannot decode.
    """
    if "compresseddepth" in msg.format.lower():
        raise BadInput("compressed_format",
                       f"format {msg.format!r} is a depth image, not a camera image")
    data = bytes(msg.data)
    if not data:
        raise BadInput("compressed_empty", "compressed image has no data")
    if data.startswith(_JPEG_SOI) and not data.rstrip(b"\x00").endswith(_JPEG_EOI):
        raise BadInput("compressed_corrupt", f"JPEG of {len(data)} bytes is truncated "
                                             "(no end-of-image marker)")
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise BadInput("compressed_corrupt",
                       f"cannot decode {len(data)} bytes of {msg.format or 'unknown format'!r}")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)                        # (H, W, 3) uint8
