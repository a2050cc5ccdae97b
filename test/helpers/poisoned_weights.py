"""The bundled model with poisoned weights (NaN or infinity in named tensors), for the tests
of the finite-weights check at load (issue 45)."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from wamdiff2_core.types import BUNDLED


def poisoned_copy(out: Path, values: dict[str, float], dtype: torch.dtype | None = None,
                  whole: bool = False) -> Path:
    """A copy of the bundled model at ``out`` whose tensors named in ``values`` hold that
    value in their first element (``whole``: in every element), in ``dtype`` if given."""
    shutil.copytree(BUNDLED, out, ignore=shutil.ignore_patterns("ar_teacher"))
    weights = load_file(str(out / "model.safetensors"))
    for name, value in values.items():
        tensor = weights[name].clone() if dtype is None else weights[name].to(dtype)
        if whole:
            tensor.fill_(value)
        else:
            tensor.view(-1)[0] = value
        weights[name] = tensor
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
