"""Small compressed images that decode to enormous ones, for the pixel-limit tests."""
from __future__ import annotations

import functools
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


@functools.lru_cache(maxsize=2)
def png_bomb(width: int = 12000, height: int = 12000) -> bytes:
    """A valid black RGB PNG of `width` x `height` (12000 x 12000: ~140 KB of file, 432 MB
    of pixels). Built without compressing the 432 MB: the deflate stream is one block of
    black rows, compressed once and repeated (each copy ends with a full flush, so it
    stands alone), then the final empty block and the checksum of all the rows."""
    row = b"\x00" + bytes(width * 3)                     # filter byte + a black row
    rows_per_block = max(1, min(height, (16 << 20) // len(row)))
    blocks, rest = divmod(height, rows_per_block)
    packer = zlib.compressobj(9)
    segment = packer.compress(row * rows_per_block) + packer.flush(zlib.Z_FULL_FLUSH)
    header, body = segment[:2], segment[2:]              # zlib header, deflate blocks
    tail = packer.compress(row * rest) + packer.flush(zlib.Z_FULL_FLUSH) if rest else b""
    checksum = 1
    for _ in range(blocks):
        checksum = zlib.adler32(row * rows_per_block, checksum)
    checksum = zlib.adler32(row * rest, checksum)
    idat = header + body * blocks + tail + b"\x03\x00" + struct.pack(">I", checksum)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)       # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat)
            + _chunk(b"IEND", b""))
