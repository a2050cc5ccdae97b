"""Torch devices named by users (``--device``, a node parameter), checked before use."""
from __future__ import annotations


def check_device(device: str):
    """The ``torch.device`` named by ``device`` if this process can use it.

    Raises ValueError (one sentence) for a name torch does not know, a CUDA device on a
    torch build without CUDA or on a machine without a visible GPU, a CUDA index beyond
    the visible GPUs, or an unavailable MPS device.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device {device!r} is not a torch device (use cpu, cuda, cuda:N "
                         "or mps)") from None
    if dev.type == "cuda":
        if torch.version.cuda is None:
            raise ValueError(f"device {device!r}: this torch build ({torch.__version__}) has "
                             "no CUDA support; use --device cpu or install a CUDA build")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {device!r}: no CUDA GPU is visible to this process")
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device {device!r}: only {count} CUDA GPU(s) are visible "
                             f"(cuda:0..cuda:{count - 1})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r}: only cpu, cuda and mps devices are supported")
    return dev
