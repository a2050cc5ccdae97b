"""Data validation at start: every image of a training set opens whole, or the run does not
start.

A truncated or corrupt image is refused here, naming it, instead of raising in the middle of
a run (hours later, at the step that first draws it). Refusing, rather than skipping the
bad records with a count, is deliberate: the global batch of every step is a function of
(seed, step) over the sample list, so a silent skip would train on other data than the
recipe names, and a run resumed after an image went bad would see other batches than the
run it continues. The message lists the files to fix or whose records to drop.
"""
from __future__ import annotations

from typing import Iterable

from wamdiff2_core.image_files import MAX_IMAGE_PIXELS, ImageFileError, open_rgb
from wamdiff2_core.training.config import RecipeError

LISTED = 3                         # bad images named in the message besides the first


def check_images(samples: Iterable, where: str, progress: bool = False,
                 max_pixels: int = MAX_IMAGE_PIXELS) -> int:
    """Decode every distinct image of ``samples`` (objects with an ``images`` tuple of
    paths) once; returns how many there are. RecipeError naming the bad ones (``where``:
    the data set, for the message) when any is missing, not an image, truncated, corrupt
    or larger than ``max_pixels``."""
    from tqdm import tqdm

    paths = sorted({p for s in samples for p in s.images})
    bad: list[tuple[str, str]] = []
    for path in tqdm(paths, desc="checking images", unit="image", dynamic_ncols=True,
                     disable=not progress or len(paths) < 500):
        try:
            open_rgb(path, max_pixels)
        except ImageFileError as exc:
            bad.append((path, str(exc)))
    if bad:
        more = [p for p, _ in bad[1:1 + LISTED]]
        rest = len(bad) - 1 - len(more)
        also = (f"; also {', '.join(more)}" + (f" and {rest} more" if rest else "")
                if more else "")
        raise RecipeError(f"{len(bad)} of {len(paths)} images of {where} cannot be used, so "
                          f"training does not start: {bad[0][1]}{also} (fix these files or "
                          f"drop their records)")
    return len(paths)
