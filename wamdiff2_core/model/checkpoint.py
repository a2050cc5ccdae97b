"""What a checkpoint directory holds, checked before a single weight is allocated.

A checkpoint is a Hugging Face directory: ``config.json`` (a Qwen3-VL config, ours with a
``wamdiff2`` section, or the reference repository's ``model_type: wam_diff2`` one), safetensors
weights (``model.safetensors``, or shards named by ``model.safetensors.index.json``),
tokenizer and processor files. ``inspect_checkpoint`` reads only the config and the
safetensors headers (a few KB) and refuses, with one sentence, anything that would make
transformers build a model of the wrong size or fill in random weights: a config that is not
an object, that is not a Qwen3-VL / WAM-Diff2 one, or that leaves a shape to transformers'
defaults (an ``{}`` config would otherwise build the 8B default shape); weights that are
missing, unexpected or of another shape than the config says (``check_tensors``).
Pickle weights are refused: loading pickle can run code.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from wamdiff2_core.user_files import (UserFileError, check_regular, parse_json,
                                      read_json)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MODEL_TYPES = {"qwen3_vl": "Qwen3-VL", "wam_diff2": "WAM-Diff2 (reference format)"}
# Sub-config -> the shape keys a config must state (transformers would fill in defaults).
REQUIRED_SHAPES = {
    "text_config": ("hidden_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "intermediate_size", "vocab_size"),
    "vision_config": ("depth", "hidden_size", "num_heads", "intermediate_size",
                      "out_hidden_size"),
}
MAX_HEADER_BYTES = 100 * 2 ** 20
SHOWN = 4                           # names shown per kind of tensor problem


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message is one clear sentence."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    file: str


@dataclass(frozen=True)
class CheckpointFiles:
    """A checkpoint directory that passed the file-level checks."""
    path: Path
    config: dict                      # config.json, a JSON object
    tensors: dict[str, TensorInfo]    # every tensor in the safetensors headers
    weight_files: tuple[str, ...]

    @property
    def model_type(self) -> str:
        return self.config["model_type"]


def inspect_checkpoint(path: str | Path) -> CheckpointFiles:
    """The config and tensor headers of checkpoint directory ``path``; CheckpointError (one
    sentence) when it is not a loadable safetensors checkpoint of a Qwen3-VL shape."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is not a directory")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} is not a checkpoint: config.json is missing")
    config = read_config(path)
    files = weight_files(path)
    tensors: dict[str, TensorInfo] = {}
    for name in files:
        for key, info in read_header(path / name).items():
            if key in tensors:
                raise CheckpointError(f"cannot load checkpoint {path}: tensor {key} is in "
                                      f"both {tensors[key].file} and {name}")
            tensors[key] = info
    return CheckpointFiles(path, config, tensors, tuple(files))


def check_source(source: str | Path | None) -> None:
    """``inspect_checkpoint`` for a model source that is an existing path (presets, None for
    the bundled model and other names are the loader's to judge). Imports no torch: callers
    run it before the slow import so that a bad checkpoint fails in well under a second."""
    from wamdiff2_core.model.presets import is_preset

    if source is None or is_preset(str(source)) or not Path(source).exists():
        return
    inspect_checkpoint(source)


def read_cameras(source: str | Path | None) -> tuple[str, ...]:
    """The cameras a model source was trained with, without loading it: a checkpoint's
    config.json ``wamdiff2.cameras``; a preset, or a checkpoint that names none: the front
    camera alone. CheckpointError for an unreadable config or a bad camera list."""
    from wamdiff2_core.model.presets import is_preset
    from wamdiff2_core.tasks.cameras import DEFAULT_CAMERAS, check_cameras

    if source is None or is_preset(str(source)):
        return DEFAULT_CAMERAS
    section = read_config(Path(source)).get("wamdiff2") or {}
    try:
        return check_cameras(section.get("cameras") or DEFAULT_CAMERAS, "its cameras")
    except ValueError as exc:
        raise CheckpointError(f"{source}/config.json: {exc}") from None


def read_config(path: Path) -> dict:
    """config.json as a dict, refused unless it is a Qwen3-VL / WAM-Diff2 config that states
    every shape."""
    file = path / "config.json"
    try:
        config = read_json(file, "model config", allow_nonfinite=True)
    except UserFileError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{file} must hold a JSON object (a model config), got a "
                              f"{type(config).__name__}")
    kind = config.get("model_type")
    if kind not in MODEL_TYPES:
        got = f"model_type {kind!r}" if kind is not None else "no model_type"
        raise CheckpointError(f"{file} is not a Qwen3-VL or WAM-Diff2 config ({got}; expected "
                              f"one of {', '.join(MODEL_TYPES)})")
    for sub, keys in REQUIRED_SHAPES.items():
        section = config.get(sub)
        if not isinstance(section, dict):
            raise CheckpointError(f"{file} has no {sub} object, so the model's shape is "
                                  f"unknown (transformers would build its default size)")
        for key in keys:
            value = section.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CheckpointError(f"{file}: {sub}.{key} must be a positive integer, got "
                                      f"{value!r} (a missing shape would be transformers' "
                                      f"default size)")
    return config


def weight_files(path: Path) -> list[str]:
    """The safetensors files holding the weights (the shards of an index, or the one file)."""
    index = path / INDEX_FILE
    if index.exists():
        try:
            weight_map = read_json(index, "safetensors index")["weight_map"]
            shards = sorted(set(weight_map.values()))
        except UserFileError as exc:
            raise CheckpointError(str(exc)) from None
        except (KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{index} is not a safetensors index (a JSON object with a "
                                  f"weight_map): {exc}") from None
        outside = [s for s in shards if not _plain_name(s)]
        if outside:
            raise CheckpointError(f"{index} names weight shard {str(outside[0])[:100]!r}, "
                                  f"which is not a file name inside {path}")
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise CheckpointError(f"{path} is missing {len(missing)} of its {len(shards)} "
                                  f"weight shards named in {INDEX_FILE}: "
                                  f"{name_list(missing)}")
        return shards
    if (path / SINGLE_FILE).is_file():
        return [SINGLE_FILE]
    names = [p.name for p in path.iterdir()]
    pickles = sorted(f for f in names if f.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise CheckpointError(
            f"{path} holds only pickle weights ({', '.join(pickles)}); wamdiff2 loads "
            f"safetensors only (pickle files can run code): convert them first")
    raise CheckpointError(f"{path} has no safetensors weights ({SINGLE_FILE} or {INDEX_FILE})")


def _plain_name(name) -> bool:
    """Whether ``name`` is a file name in its directory (no folder, no ``..``)."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name \
        and "\\" not in name and "\0" not in name


def read_header(file: Path) -> dict[str, TensorInfo]:
    """Name -> dtype, shape of every tensor in a safetensors file, from its header alone;
    the file's length is checked against the header's offsets (a truncated file is refused)."""
    where = f"cannot load checkpoint {file.parent}: {file.name} is not a safetensors file"
    try:
        check_regular(file, "weight file")      # a FIFO would block open() forever
    except UserFileError as exc:
        raise CheckpointError(f"cannot load checkpoint {file.parent}: {exc}") from None
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{where} (it is {size} bytes long)")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, MAX_HEADER_BYTES):
                raise CheckpointError(f"{where} (its header length {n} does not fit the file)")
            header = parse_json(f.read(n), file, "the header of weight file")
    except UserFileError as exc:
        raise CheckpointError(f"{where} ({exc.problem})") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {file}: {exc}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where} (its header is not a JSON object)")
    out, end = {}, 0
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        try:
            shape = tuple(int(d) for d in entry["shape"])
            start, stop = (int(o) for o in entry["data_offsets"])
            out[key] = TensorInfo(str(entry["dtype"]), shape, file.name)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{where} (tensor {key}'s header entry is malformed)") from None
        end = max(end, stop)
    if 8 + n + end > size:
        raise CheckpointError(f"cannot load checkpoint {file.parent}: {file.name} is truncated "
                              f"({size} bytes, its header describes {8 + n + end})")
    return out


def check_tensors(files: CheckpointFiles, expected: dict[str, tuple[int, ...]],
                  optional: set[str] = frozenset()) -> None:
    """CheckpointError naming the tensors that are missing, unexpected or of another shape
    than the model ``expected`` (name -> shape, from the config) has; ``optional``: names that
    may be absent (tied weights)."""
    found = files.tensors
    missing = sorted(set(expected) - set(found) - set(optional))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(expected) & set(found) if tuple(expected[k]) != found[k].shape)
    problems = []
    if missing:
        problems.append(f"{len(missing)} of the {len(expected)} tensors its config needs are "
                        f"missing ({name_list(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} tensors are not part of the model "
                        f"({name_list(unexpected)})")
    if wrong:
        k = wrong[0]
        problems.append(f"{len(wrong)} tensors have another shape than the config says "
                        f"({k}: {list(found[k].shape)} in {found[k].file}, config "
                        f"{list(expected[k])}{' and others' if len(wrong) > 1 else ''})")
    if problems:
        raise CheckpointError(f"checkpoint {files.path} does not match its config.json: "
                              + "; ".join(problems))


def name_list(items: list[str]) -> str:
    """The first few of ``items``, comma-separated, with how many more there are."""
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")
