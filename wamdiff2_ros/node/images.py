"""sensor_msgs/Image and CompressedImage -> RGB arrays, without cv_bridge.

Both functions return a C-contiguous (H, W, 3) uint8 RGB array or raise `BadInput`; they
never return a partial or garbage frame. Raw images honour `step` (row padding) and
`is_bigendian` (16-bit samples); 16-bit data keeps its 8 most significant bits. Both refuse
images of more than `max_pixels` pixels before converting or decoding anything (a 136 KB
PNG can hold 12000x12000 pixels: 432 MB decoded).
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np
from PIL import Image as PILImage

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


DEFAULT_MAX_PIXELS = 4096 * 4096


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise BadInput("image_too_large", f"image of {width}x{height} = {width * height} "
                                          f"pixels refused (max_image_pixels {max_pixels})")


def image_to_rgb(msg, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """A sensor_msgs/Image as an (H, W, 3) uint8 RGB array.

    Raises BadInput for an unknown encoding, a zero size, more than `max_pixels` pixels, a
    `step` smaller than one row, data shorter than `step * height`, or an odd width with a
    4:2:2 YUV encoding.
    """
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise BadInput("image_size", f"image has no pixels ({width}x{height})")
    _check_pixels(width, height, max_pixels)
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


_JPEG_SOI, _JPEG_EOI, _JPEG_SOS = b"\xff\xd8", b"\xff\xd9", b"\xff\xda"


def jpeg_complete(data: bytes) -> bool:
    """Whether a JPEG's last scan is followed by an end-of-image marker.

    Inside entropy-coded data a 0xFF byte is always stuffed (FF 00), so FF D9 after the last
    start-of-scan is the real end of the image; bytes after it (padding, trailers some
    cameras append) do not matter. An embedded thumbnail's end marker comes before the main
    image's scans, so it cannot make a truncated image look complete.
    """
    last_scan = data.rfind(_JPEG_SOS)
    return last_scan >= 0 and data.find(_JPEG_EOI, last_scan + 2) >= 0


def compressed_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a compressed image's header without decoding its pixels; None
    where no header can be read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")              # PIL's DecompressionBombWarning
            with PILImage.open(io.BytesIO(data)) as image:   # lazy: reads the header only
                return image.size
    except Exception:  # noqa: BLE001 - PIL raises many types for data it does not know
        return None


def compressed_to_rgb(msg, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """A sensor_msgs/CompressedImage (JPEG, PNG, anything OpenCV decodes) as RGB uint8.

    Raises BadInput for empty data, compressedDepth (not a camera image), a JPEG whose last
    scan has no end-of-image marker (truncated in transit), data with no image header PIL
    can read, more than `max_pixels` pixels (read from the header before decoding), or
    data OpenCV cannot decode.
    """
    if "compresseddepth" in msg.format.lower():
        raise BadInput("compressed_format",
                       f"format {msg.format[:40]!r} is a depth image, not a camera image")
    data = bytes(msg.data)
    if not data:
        raise BadInput("compressed_empty", "compressed image has no data")
    if data.startswith(_JPEG_SOI) and not jpeg_complete(data):
        raise BadInput("compressed_corrupt", f"JPEG of {len(data)} bytes is truncated "
                                             "(no end-of-image marker after its last scan)")
    size = compressed_size(data)
    if size is None:       # the size must be known before decoding: refuse, do not guess
        raise BadInput("compressed_corrupt", f"no image header in {len(data)} bytes of "
                                             f"{msg.format[:40] or 'unknown format'!r}")
    _check_pixels(size[0], size[1], max_pixels)
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise BadInput("compressed_corrupt", f"cannot decode {len(data)} bytes of "
                                             f"{msg.format[:40] or 'unknown format'!r}")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)                        # (H, W, 3) uint8
