"""Image files read whole or refused in one sentence: never a traceback, never a bomb.

``open_rgb`` reads the header first and refuses an image of more than ``max_pixels`` before
any pixel is decoded (a 100 KB PNG can claim 12000 x 12000 pixels and take gigabytes to
decode), then decodes it completely, so a truncated or corrupt file fails here, when it is
opened, and not later in the middle of a run.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

MAX_IMAGE_PIXELS = 40_000_000      # above 8K UHD (33.2 MP); 120 MB decoded as RGB


class ImageFileError(ValueError):
    """An image file that cannot be used; the message is one sentence naming the file."""


def open_rgb(path: str | os.PathLike, max_pixels: int = MAX_IMAGE_PIXELS):
    """The image at ``path`` as a fully decoded RGB ``PIL.Image``.

    Raises ImageFileError when the file is missing, is not an image, has more than
    ``max_pixels`` pixels (checked from the header, before decoding), or is truncated or
    corrupt.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with warnings.catch_warnings():      # PIL's own, higher bomb limit only warns
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(path)
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
