"""Files that are either whole or absent: written to a temporary sibling, renamed in place."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a hidden temporary sibling renamed into place.

    Readers see the old file or the whole new one, never a part. When the write fails (a
    full disk, a kill signal turned into an exception) the temporary is removed and the
    old file is left as it was.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
