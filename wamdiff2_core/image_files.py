"""Image files read whole or refused in one sentence: never a traceback, never a bomb.

``open_rgb`` reads the header first and refuses an image of more than ``max_pixels`` before
any pixel is decoded (a 100 KB PNG can claim 12000 x 12000 pixels and take gigabytes to
decode), then decodes it completely, so a truncated or corrupt file fails here, when it is
opened, and not later in the middle of a run. ``image_size`` reads the header alone. Both
open regular files only: a FIFO, device or directory is refused without blocking (the file
is opened non-blocking and checked with ``fstat`` before any byte is read).
"""
from __future__ import annotations

import io
import os
import stat
import warnings
from contextlib import contextmanager
from pathlib import Path

MAX_IMAGE_PIXELS = 40_000_000      # above 8K UHD (33.2 MP); 120 MB decoded as RGB


class ImageFileError(ValueError):
    """An image file that cannot be used; the message is one sentence naming the file."""


@contextmanager
def _regular_file(path: Path):
    """The open binary file at ``path`` when it is a regular file; ImageFileError, one
    sentence, otherwise (O_NONBLOCK: opening a FIFO never waits for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ImageFileError(f"cannot read image {path}: it does not exist") from None
    except PermissionError:
        raise ImageFileError(f"cannot read image {path}: permission denied") from None
    except OSError as exc:
        raise ImageFileError(f"cannot read image {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)"
                    if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode)
                    or stat.S_ISBLK(mode) else "not a regular file")
            raise ImageFileError(f"cannot read image {path}: it is {kind}, not a regular "
                                 f"file")
        os.set_blocking(fd, True)
        file = io.open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield file


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(width, height) of the image at ``path`` from its header alone; ImageFileError, one
    sentence naming the file, when it is missing, not a regular file or not an image."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    with _regular_file(path) as file:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(file) as image:
                    return image.size
        except UnidentifiedImageError:
            raise ImageFileError(f"cannot read image {path}: it is not an image "
                                 f"file") from None
        except (Image.DecompressionBombError, OSError, ValueError, SyntaxError,
                EOFError) as exc:
            reason = str(exc).strip() or type(exc).__name__
            raise ImageFileError(f"cannot read image {path}: {reason}") from None


def open_rgb(path: str | os.PathLike, max_pixels: int = MAX_IMAGE_PIXELS):
    """The image at ``path`` as a fully decoded RGB ``PIL.Image``.

    Raises ImageFileError when the file is missing, is not a regular file (a FIFO is refused,
    never waited on), is not an image, has more than ``max_pixels`` pixels (checked from the
    header, before decoding), or is truncated or corrupt.
    """
    path = Path(path)
    with _regular_file(path) as file:
        return _decoded_rgb(path, file, max_pixels)


def _decoded_rgb(path: Path, file, max_pixels: int):
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():      # PIL's own, higher bomb limit only warns
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(file)
        with image:
            width, height = image.size
            if width * height > max_pixels:
                raise ImageFileError(
                    f"cannot read image {path}: it has {width}x{height} = "
                    f"{width * height / 1e6:.0f} M pixels, more than the limit of "
                    f"{max_pixels / 1e6:.0f} M (a decompression bomb, or far larger than a "
                    f"camera frame)")
            image.load()
            return image.convert("RGB")
    except ImageFileError:
        raise
    except FileNotFoundError:
        raise ImageFileError(f"cannot read image {path}: it does not exist") from None
    except IsADirectoryError:
        raise ImageFileError(f"cannot read image {path}: it is a directory") from None
    except PermissionError:
        raise ImageFileError(f"cannot read image {path}: permission denied") from None
    except UnidentifiedImageError:
        raise ImageFileError(f"cannot read image {path}: it is not an image file") from None
    except Image.DecompressionBombError:         # PIL's own limit, checked when opening
        raise ImageFileError(
            f"cannot read image {path}: it has more than {2 * Image.MAX_IMAGE_PIXELS / 1e6:.0f}"
            f" M pixels, more than the limit of {max_pixels / 1e6:.0f} M (a decompression "
            f"bomb, or far larger than a camera frame)") from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:   # PIL's decoder errors
        reason = str(exc).strip() or type(exc).__name__
        raise ImageFileError(f"cannot read image {path}: it is truncated or corrupt "
                             f"({reason})") from None
