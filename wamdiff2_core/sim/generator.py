"""``wamdiff2 data generate``: a data set in the reference conversation format.

Layout (docs/INTERFACES.md, "Generated data set")::

    DIR/images/<episode>_<frame>.png   the camera (one camera)
    DIR/images/<episode>_<frame>_<camera>.png   each camera of a rig (--cameras)
    DIR/camera.json                    resolution, intrinsics, mount (a rig: each camera's)
    DIR/train.json                     records sorted by id (one per task per frame)
    DIR/progress.json, DIR/.parts/     resume state; both gone once the run has finished

Deterministic: episode ``e`` uses scenario ``scenarios[e % len(scenarios)]`` and world
seed ``SeedSequence([seed, e])``; same arguments, same bytes (JSON and PNG). Every file is
written to a temporary name and renamed, so an interrupted run leaves no half-written
file, and ``--resume`` regenerates only the episodes that had not finished.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from wamdiff2_core import tasks
from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.sim.episode import Capture, EpisodeConfig, run_episode
from wamdiff2_core.sim.scenarios import SCENARIOS
from wamdiff2_core.sim.world import CONTROL_DT
from wamdiff2_core.tasks import RECORDS_FILE

TASKS = ("planning", "detection", "qa")
PROGRESS_FILE = "progress.json"
PARTS_DIR = ".parts"
IMAGES_DIR = "images"
FORMAT_VERSION = 1


class GeneratorError(Exception):
    """A user error (wrong directory state, arguments that do not match a resumed run)."""


@dataclass(frozen=True)
class GeneratorConfig:
    """Everything that determines a data set's bytes (the output directory aside)."""

    episodes: int
    seed: int = 0
    tasks: tuple[str, ...] = TASKS
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("episodes must be at least 1")
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown or not self.tasks:
            raise ValueError(f"tasks must be a non-empty subset of {TASKS}, got {self.tasks}")
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown or not self.scenarios:
            raise ValueError(f"unknown scenarios {unknown}; known: {tuple(SCENARIOS)}")

    def signature(self) -> dict:
        """A JSON-able description used to check that a resumed run has the same arguments."""
        return {"version": FORMAT_VERSION, **json.loads(json.dumps(asdict(self)))}


@dataclass(frozen=True)
class GenerateSummary:
    out: str
    episodes: int
    frames: int
    records: dict
    resumed_episodes: int
    seconds: float


def episode_seed(seed: int, episode: int) -> int:
    """The world seed of episode ``episode`` of a run with ``seed``."""
    return int(np.random.SeedSequence([seed, episode]).generate_state(1)[0])


# ------------------------------------------------------------------------------ files
def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _png_bytes(image: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def _r(values, digits: int = 4):
    """Round floats (nested lists/arrays) for stable, compact JSON."""
    if isinstance(values, (list, tuple, np.ndarray)):
        return [_r(v, digits) for v in values]
    value = round(float(values), digits)
    return 0.0 if value == 0.0 else value   # never -0.0


# ------------------------------------------------------------------------------ records
def frame_records(capture: Capture, scenario: str, seed: int, episode: int,
                  config: GeneratorConfig, image_paths: list[str]) -> list[dict]:
    """The records (one per task) of one captured frame; ``image_paths``: one per camera of
    the rig, in its order (detection boxes are the first camera's)."""
    rig = config.episode.camera
    cameras = rig.names
    width, height = rig.first.width, rig.first.height
    base = {"episode": episode, "frame": capture.frame, "scenario": scenario, "seed": seed,
            "image_size": [width, height], "time_s": _r(capture.step * CONTROL_DT, 3)}
    stem = f"{episode:05d}_{capture.frame:03d}"
    records = []
    for task in config.tasks:
        if task == "planning":
            prompt = tasks.planning_prompt(capture.command, velocity=tuple(capture.velocity),
                                           acceleration=tuple(capture.acceleration),
                                           cameras=cameras)
            answer = tasks.format_waypoints(capture.ego_future)
            meta = {"command": capture.command, "velocity": _r(capture.velocity),
                    "acceleration": _r(capture.acceleration),
                    "ego_future": _r(capture.ego_future),
                    "ego_size": _r([capture.ego.length, capture.ego.width]),
                    "others_future": [{"id": o["id"], "size": _r(o["size"]),
                                       "poses": _r(o["poses"])}
                                      for o in capture.others_future]}
        elif task == "detection":
            prompt = tasks.detection_prompt(cameras)
            answer = tasks.format_detections(
                [tasks.Detection(box=b.box, label=b.label) for b in capture.boxes],
                width, height)
            meta = {"boxes": [b.to_meta() for b in capture.boxes]}
        else:
            prompt = tasks.qa_prompt(capture.qa.question, cameras=cameras)
            answer = tasks.format_answer(capture.qa.answer)
            meta = {"question": capture.qa.question, "answer": capture.qa.answer,
                    "answer_set": list(capture.qa.answer_set),
                    "template": capture.qa.template}
        record = tasks.conversation_record(f"{stem}_{task}", image_paths, prompt, answer,
                                           task)
        record["meta"] = {**base, **meta}
        records.append(record)
    return records


def generate_episode(out: Path, config: GeneratorConfig, episode: int) -> list[dict]:
    """Simulate one episode, write its images and return its records."""
    scenario = config.scenarios[episode % len(config.scenarios)]
    seed = episode_seed(config.seed, episode)
    _, captures = run_episode(scenario, seed, episode, config.episode)
    names = config.episode.camera.names
    records = []
    for capture in captures:
        stem = f"{IMAGES_DIR}/{episode:05d}_{capture.frame:03d}"
        paths = [f"{stem}.png"] if len(names) == 1 else [f"{stem}_{n}.png" for n in names]
        for path, image in zip(paths, capture.images):
            write_atomic(out / path, _png_bytes(image))
        records.extend(frame_records(capture, scenario, seed, episode, config, paths))
    return records


# ------------------------------------------------------------------------------ the run
def generate(out: str | Path, config: GeneratorConfig, resume: bool = False,
             progress: bool = True) -> GenerateSummary:
    """Write the data set of ``config`` to ``out`` (see the module docstring)."""
    from tqdm import tqdm

    start = time.perf_counter()
    out = Path(out)
    progress_path, parts = out / PROGRESS_FILE, out / PARTS_DIR
    signature = config.signature()
    if progress_path.exists():
        state = _read(progress_path, "progress file", dict)
        if not resume:
            raise GeneratorError(f"{out} holds an unfinished run: pass --resume to continue "
                                 "it, or choose another directory")
        if state.get("config") != signature:
            raise GeneratorError(f"{out} holds an unfinished run with other arguments; "
                                 "resume it with the same arguments")
    elif (out / RECORDS_FILE).exists():
        raise GeneratorError(f"{out} already holds a finished data set ({RECORDS_FILE}); "
                             "choose another directory")
    (out / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
    parts.mkdir(exist_ok=True)
    write_atomic(progress_path, _json_bytes({"config": signature}))
    write_atomic(out / "camera.json", _json_bytes(config.episode.camera.to_json()))

    done = {int(p.stem) for p in parts.glob("*.json")}
    resumed = len(done)
    with tqdm(total=config.episodes, initial=resumed, unit="episode", desc="data generate",
              disable=not progress, dynamic_ncols=True) as bar:
        for episode in range(config.episodes):
            if episode in done:
                continue
            records = generate_episode(out, config, episode)
            write_atomic(parts / f"{episode:05d}.json", _json_bytes(records))
            bar.update(1)
    records = []
    for episode in range(config.episodes):
        records.extend(_records(parts / f"{episode:05d}.json", "episode part"))
    records.sort(key=lambda record: record["id"])
    write_atomic(out / RECORDS_FILE, _json_bytes(records))
    shutil.rmtree(parts)
    progress_path.unlink()
    counts = {task: sum(r["task"] == task for r in records) for task in config.tasks}
    frames = len({(r["meta"]["episode"], r["meta"]["frame"]) for r in records})
    return GenerateSummary(out=str(out), episodes=config.episodes, frames=frames,
                           records=counts, resumed_episodes=resumed,
                           seconds=round(time.perf_counter() - start, 2))


# ------------------------------------------------------------------------------ merging
def merge(out: str | Path, sources: list[str | Path]) -> dict:
    """Write ``out/train.json`` holding the records of every finished data set in
    ``sources`` (e.g. expert data and ``--drive perturbed`` recovery data), for one training
    run over both. Images stay where they are: each record's paths are rewritten relative
    to ``out``. Ids become ``s<k>_<id>`` (``k``: the source's place in ``sources``) so that
    equal ids of two sources stay apart; ``meta.source`` names the source folder. The
    sources must share one camera (``camera.json``), which is copied. Returns
    ``{source: records}``."""

    out = Path(out)
    if (out / RECORDS_FILE).exists():
        raise GeneratorError(f"{out} already holds a data set ({RECORDS_FILE}); choose "
                             "another directory")
    if len(sources) < 2:
        raise GeneratorError("merge needs at least two data sets")
    folders = [Path(source).resolve() for source in sources]
    if len(set(folders)) != len(folders):
        raise GeneratorError("a data set is named twice")
    camera = None
    for folder in folders:
        if not (folder / RECORDS_FILE).is_file():
            raise GeneratorError(f"{folder} holds no finished data set ({RECORDS_FILE})")
        text = _camera_text(folder / "camera.json")
        if camera is not None and text != camera:
            raise GeneratorError(f"{folder} was taken with another camera than "
                                 f"{folders[0]} (camera.json differs)")
        camera = text
    out.mkdir(parents=True, exist_ok=True)
    target = out.resolve()
    merged, counts = [], {}
    for k, folder in enumerate(folders):
        records = _records(folder / RECORDS_FILE, "records file")
        for record in records:
            images = record.get("image", [])
            images = [images] if isinstance(images, str) else images
            if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
                raise GeneratorError(f"records file {folder / RECORDS_FILE}: record "
                                     f"{str(record['id'])[:80]} has an image that is not a "
                                     f"path")
            record["image"] = [os.path.relpath(folder / path, target) for path in images]
            record["id"] = f"s{k}_{record['id']}"
            record.setdefault("meta", {})["source"] = folder.name
        merged.extend(records)
        counts[str(sources[k])] = len(records)
    if camera is not None:
        write_atomic(out / "camera.json", camera.encode())
    write_atomic(out / RECORDS_FILE, _json_bytes(merged))
    return counts


def _read(path: Path, what: str, kind: type):
    """The JSON document of ``path`` (a user file's limits), of type ``kind``;
    GeneratorError (one sentence naming the file) otherwise."""
    from wamdiff2_core.user_files import MAX_RECORDS_BYTES, read_json

    try:
        doc = read_json(path, what, MAX_RECORDS_BYTES)
    except ValueError as exc:
        raise GeneratorError(str(exc)) from None
    if not isinstance(doc, kind):
        raise GeneratorError(f"{what} {path} must hold a JSON {kind.__name__}")
    return doc


def _records(path: Path, what: str) -> list:
    """The records of a part or a finished data set: a list of objects with an id."""
    records = _read(path, what, list)
    for i, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("id"), str) or \
                not isinstance(record.get("meta", {}), dict):
            raise GeneratorError(f"{what} {path}: record {i} is not an object with a string "
                                 f"id (and a meta object)")
        meta = record.get("meta", {})
        if what == "episode part" and not (isinstance(record.get("task"), str) and
                                           {"episode", "frame"} <= set(meta)):
            raise GeneratorError(f"{what} {path}: record {i} lacks its task or its meta "
                                 f"episode and frame; delete the part and --resume")
    return records


def _camera_text(path: Path) -> str | None:
    """The text of a data set's camera.json, None when there is none."""
    from wamdiff2_core.user_files import read_text

    if not os.path.lexists(path):
        return None
    try:
        return read_text(path, "camera file", 1 << 20)
    except ValueError as exc:
        raise GeneratorError(str(exc)) from None
