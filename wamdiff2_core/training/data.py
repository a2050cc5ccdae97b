"""Conversation data for training: records, deterministic order, sharded batches.

Records are the reference conversation format (``DIR/train.json`` or any records file, a JSON
list or JSONL, image paths relative to the file's folder or absolute). The global batch of
optimizer step s is a pure function of (seed, s), known without state: a resumed run, and runs
with any number of processes, see the same global batches (``GlobalOrder.position`` is what a
checkpoint records of the loader). Each process takes its own slice of every global batch
(rank-major inside each accumulation micro-step).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Hashable

import numpy as np
import torch

from wamdiff2_core.image_files import ImageFileError, open_rgb
from wamdiff2_core.tasks import (AnswerParseError, check_cameras, parse_planning_prompt,
                                 planning_prompt, prompt_cameras,
                                 read_records, record_prompt_and_answer, record_task)
from wamdiff2_core.tasks.inputs import image_root
from wamdiff2_core.training.config import RecipeError


@dataclass(frozen=True)
class Sample:
    id: str
    task: str
    prompt: str
    answer: str
    images: tuple[str, ...]        # absolute paths


def load_samples(root: str | Path, split: str = "train.json", tasks: tuple[str, ...] = (),
                 limit: int = 0, cameras: tuple[str, ...] | None = None,
                 images_under: str | Path | None = None) -> list[Sample]:
    """The answered records of ``root/split`` (or of ``root`` itself when it is a records
    file) as samples; relative image paths are under ``images_under`` (``data.image_root``)
    or where ``tasks.inputs.image_root`` says (the rule predict and eval use: a data set
    directory's or this project's records beside the file, the reference's records under the
    working directory). Records without an answer are skipped; a record without a ``task``
    (the reference repository's data) has the task its answer's format says
    (``tasks.record_task``). A malformed record or a missing
    image is a RecipeError naming the record, and so is (``cameras`` given: the recipe's
    ``data.cameras``) a prompt that names other cameras, or another order."""
    if cameras is not None:
        try:
            cameras = check_cameras(cameras, "data.cameras")
        except ValueError as exc:
            raise RecipeError(str(exc)) from None
    root = Path(root)
    is_dir = not root.is_file()                  # a data set directory holding `split`
    file = root / split if is_dir else root
    if not file.is_file():
        raise RecipeError(f"no records file at {file} (data.path is a data set directory "
                          f"holding data.split, or a records file)")
    try:
        records = read_records(file)
        under = image_root(records, file, is_dir, images_under or None,
                           option="data.image_root")
    except ValueError as exc:
        raise RecipeError(str(exc)) from None
    folder = under.path
    out = []
    for i, rec in enumerate(records):
        try:
            prompt, answer = record_prompt_and_answer(rec)
        except ValueError as exc:
            raise RecipeError(f"record {i} of {file} is malformed: {exc}") from None
        task = record_task(rec) or ""
        if answer is None or (tasks and task not in tasks):
            continue
        named = prompt_cameras(prompt)
        if cameras is not None and named is not None and named != cameras:
            raise RecipeError(f"record {rec.get('id', i)} of {file} shows the cameras "
                              f"{', '.join(named)} but data.cameras is [{', '.join(cameras)}] "
                              f"(set data.cameras to the data set's cameras, in order)")
        images = rec.get("image", [])
        images = [images] if isinstance(images, str) else images
        paths = tuple(str(p if Path(p).is_absolute() else folder / p) for p in images)
        for p in paths:
            if not Path(p).is_file():
                raise RecipeError(f"record {rec.get('id', i)} of {file} names a missing image "
                                  f"{p} ({under.describe('data.image_root')})")
        out.append(Sample(str(rec.get("id", i)), task, prompt, answer, paths))
        if limit and len(out) >= limit:
            break
    if not out:
        raise RecipeError(f"{file} holds no answered records"
                          + (f" of tasks {list(tasks)}" if tasks else ""))
    return out


class GlobalOrder:
    """Which samples make up the global batch of each optimizer step.

    Epoch e is drawn with a generator seeded by (seed, e). With ``group_by`` keys (the task
    of each sample, or (task, answer length bucket): ``group_keys``), every global batch
    holds samples of one key only (each key's draw is cut into whole batches, a short tail is
    filled from that draw's start, and the batches of all keys are shuffled): answers in a
    batch then have similar lengths and little padding. Without keys, the epoch's draw is
    cut into batches in order.

    ``weights`` (key -> w > 0, keys not named: 1) set the mix: an epoch draws
    ``round(w * n_k)`` of the ``n_k`` samples of key k (a permutation of them; for w > 1,
    further permutations appended), so a key's share of the steps is proportional to
    ``w * n_k``. With every weight 1 the order is the unweighted one, draw for draw.
    """

    def __init__(self, n: int, global_batch: int, seed: int,
                 group_by: list[Hashable] | None = None,
                 weights: dict[Hashable, float] | None = None):
        self.n, self.g, self.seed = n, global_batch, seed
        self.keys = group_by
        self.weights = {k: float(w) for k, w in (weights or {}).items() if float(w) != 1.0}
        if self.weights and group_by is None:
            raise ValueError("weights need the key of every sample (group_by)")
        bad = {k: w for k, w in self.weights.items() if not w > 0}
        if bad:
            raise ValueError(f"weights must be > 0, got {bad}")
        self._epoch: tuple[int, list[list[int]]] | None = None

    def _draw(self, rng: np.random.Generator, members: list[int], key: Hashable) -> list[int]:
        """``round(w * len(members))`` members (at least one): whole permutations, then the
        start of one more."""
        w = self.weights.get(key, 1.0)
        want = max(1, round(w * len(members)))
        out: list[int] = []
        while len(out) < want:
            out += [members[j] for j in rng.permutation(len(members))]
        return out[:want]

    def _batches(self, epoch: int) -> list[list[int]]:
        if self._epoch is not None and self._epoch[0] == epoch:
            return self._epoch[1]
        rng = np.random.default_rng([self.seed, epoch])
        if self.keys is None:
            perm = rng.permutation(self.n).tolist()
            perm += perm[:(-len(perm)) % self.g]
            batches = [perm[i:i + self.g] for i in range(0, len(perm), self.g)]
        else:
            batches = []
            for key in sorted(set(self.keys)):
                members = [i for i, k in enumerate(self.keys) if k == key]
                perm = self._draw(rng, members, key)
                while len(perm) % self.g:
                    perm += perm[:self.g - len(perm) % self.g]
                batches += [perm[i:i + self.g] for i in range(0, len(perm), self.g)]
            batches = [batches[j] for j in rng.permutation(len(batches))]
        self._epoch = (epoch, batches)
        return batches

    def batches_per_epoch(self) -> int:
        return len(self._batches(0))

    def indices(self, step: int) -> list[int]:
        """Data set indices of optimizer step ``step``'s global batch."""
        per_epoch = self.batches_per_epoch()
        return self._batches(step // per_epoch)[step % per_epoch]

    def position(self, step: int) -> dict[str, int]:
        """Where the data loader stands before optimizer step ``step``: the step, its epoch
        and batch within the epoch, the samples drawn so far (all of it follows from
        ``step``; a checkpoint records it to say so)."""
        per_epoch = self.batches_per_epoch()
        return {"step": step, "epoch": step // per_epoch, "batch": step % per_epoch,
                "batches_per_epoch": per_epoch, "samples_seen": step * self.g}

    def positions(self, step: int) -> list[int]:
        """Stream positions of step ``step``'s samples (they seed the per-sample noise)."""
        return list(range(step * self.g, (step + 1) * self.g))

    def mix(self) -> dict[str, float]:
        """Share of an epoch's optimizer steps per task ({} without keys)."""
        if self.keys is None:
            return {}
        counts: dict[str, int] = {}
        for batch in self._batches(0):
            task = key_task(self.keys[batch[0]])
            counts[task] = counts.get(task, 0) + 1
        total = sum(counts.values())
        return {k: counts[k] / total for k in sorted(counts)}


def group_keys(samples: list[Sample], answer_ids: list[list[int]],
               length_bucket: int = 0) -> list[Hashable]:
    """The batch-grouping key of each sample: its task, or with ``length_bucket`` > 0
    (task, answer length // length_bucket), so that long and short answers of one task
    (detection: 2 to ~290 tokens) are not padded to each other."""
    if not length_bucket:
        return [s.task for s in samples]
    return [(s.task, len(ids) // length_bucket) for s, ids in zip(samples, answer_ids)]


def key_task(key: Hashable) -> str:
    """The task of a ``group_keys`` key."""
    return key[0] if isinstance(key, tuple) else key


def shard(items: list, rank: int, world: int, micro: int) -> list[list]:
    """This process's micro-batches of one global batch: micro-step k, rank r takes
    ``items[(k * world + r) * micro:][:micro]``."""
    accum = len(items) // (micro * world)
    return [items[(k * world + rank) * micro:][:micro] for k in range(accum)]


@dataclass
class TrainBatch:
    prompt: dict               # encode_prompts output (left-padded, pixels)
    answers: torch.Tensor      # (B, A) answer ids + end-of-answer, padded with end-of-answer
    lengths: torch.Tensor      # (B,) per-row answer length (a multiple of the block size)
    positions: list[int]       # stream positions (seed the per-sample noise)
    norm: torch.Tensor | None = None   # (B,) loss normaliser per row (None: ``lengths``)
    images: list[tuple[str, ...]] | None = None   # each row's image paths

    @property
    def loss_norm(self) -> torch.Tensor:
        """(B,) what each row's summed answer-token loss is divided by."""
        return self.lengths if self.norm is None else self.norm

    @property
    def size(self) -> int:
        return self.answers.shape[0]


def without_lateral_status(prompt: str) -> str:
    """A planning prompt with its lateral velocity and acceleration written as 0.00; any
    other prompt (another task's, or a planning turn not in the template) as it is."""
    try:
        state = parse_planning_prompt(prompt)
    except AnswerParseError:
        return prompt
    return planning_prompt(state["command"], velocity=(state["velocity"][0], 0.0),
                           acceleration=(state["acceleration"][0], 0.0),
                           position=state["position"], cameras=state["cameras"])


def lateral_dropped(seed: int, position: int, probability: float) -> bool:
    """Whether the sample at stream ``position`` loses its lateral ego status: a pure
    function of (seed, position), like the sample's noise, so resumed runs and any number of
    processes make the same choice."""
    if probability <= 0.0:
        return False
    draw = np.random.default_rng(np.random.SeedSequence([seed, int(position), 0x1A7])).random()
    return bool(draw < probability)


class BatchMaker:
    """Turns stream positions into encoded batches for one processor and block size."""

    def __init__(self, samples: list[Sample], processor, block_size: int,
                 max_answer_tokens: int, loss_norm: str = "answer",
                 lateral_status_dropout: float = 0.0, seed: int = 0):
        """Samples whose answer (+ end-of-answer, padded to whole blocks) is longer than
        ``max_answer_tokens`` are left out (``dropped`` counts them). ``loss_norm``: each
        row's loss normaliser is its own answer length ("answer") or the mean answer length
        of its task over the kept samples ("task"). ``lateral_status_dropout``: the
        probability that a planning sample's prompt is written with its lateral velocity and
        acceleration as 0.00 (:func:`lateral_dropped` draws it from ``seed`` and the stream
        position)."""
        self.processor, self.block_size = processor, block_size
        self.lateral_status_dropout, self.seed = lateral_status_dropout, seed
        self._images: dict[str, np.ndarray] = {}
        self.samples, self.answer_ids = [], []
        self.dropped_by_task: dict[str, int] = {}
        for s in samples:
            ids = processor.encode_answer(s.answer, block_size)
            if len(ids) <= max_answer_tokens:
                self.samples.append(s)
                self.answer_ids.append(ids)
            else:
                self.dropped_by_task[s.task] = self.dropped_by_task.get(s.task, 0) + 1
        self.dropped = len(samples) - len(self.samples)
        if not self.samples:
            raise RecipeError(f"every answer is longer than data.max_answer_tokens="
                              f"{max_answer_tokens}")
        self.norms = [float(len(ids)) for ids in self.answer_ids]
        if loss_norm == "task":
            by_task: dict[str, list[float]] = {}
            for s, n in zip(self.samples, self.norms):
                by_task.setdefault(s.task, []).append(n)
            mean = {task: sum(v) / len(v) for task, v in by_task.items()}
            self.norms = [mean[s.task] for s in self.samples]
        elif loss_norm != "answer":
            raise ValueError(f"loss_norm must be 'answer' or 'task', got {loss_norm!r}")

    def _image(self, path: str) -> np.ndarray:
        if path not in self._images:
            try:
                self._images[path] = np.asarray(open_rgb(path))
            except ImageFileError as exc:     # changed since data_check ran at start
                raise RecipeError(str(exc)) from None
        return self._images[path]

    def make(self, indices: list[int], positions: list[int]) -> TrainBatch:
        samples = [self.samples[i] for i in indices]
        prompts = [without_lateral_status(s.prompt)
                   if s.task == "planning" and lateral_dropped(self.seed, pos,
                                                               self.lateral_status_dropout)
                   else s.prompt for s, pos in zip(samples, positions)]
        prompt = self.processor.encode_prompts(prompts,
                                               [[self._image(p) for p in s.images]
                                                for s in samples])
        ids = [self.answer_ids[i] for i in indices]
        width = max(len(a) for a in ids)
        answers = torch.full((len(ids), width), self.processor.eoa_id, dtype=torch.long)
        for r, a in enumerate(ids):
            answers[r, :len(a)] = torch.tensor(a)
        lengths = torch.tensor([len(a) for a in ids])
        norm = torch.tensor([self.norms[i] for i in indices])
        return TrainBatch(prompt, answers, lengths, list(positions), norm,
                          [s.images for s in samples])
