"""Records decoded in batches grouped by prompt length, each answer a predictions-file object.

``prepare`` turns records into jobs (the request, the image paths and the prompt's length in
tokens, read from the image headers without decoding them) or into one-sentence errors (a
record with too much text, checked before tokenization; a malformed record, no image, an
unreadable image or one that is not a regular file, a prompt too long for the model).
``plan_batches`` groups jobs that share decoding settings, sorts each group by prompt length
and cuts it into batches, so that rows padded together differ little in length.
``decode_batch`` decodes one batch and returns one object per record: a record whose image
turns out to be corrupt, or whose answer does not end within the token budget, gets
``error`` and the others go on; a batch whose decode fails is decoded again one record at
a time, so one bad record never costs its neighbours their answers.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wamdiff2_core.image_files import ImageFileError, image_size, open_rgb
from wamdiff2_core.types import PromptTooLong

from .predictions import prediction_item
from .requests import Ask, ask, parsed


@dataclass(frozen=True)
class Job:
    """One record ready to decode."""

    index: int                          # position in the input
    ask: Ask
    images: tuple[Path, ...]
    sizes: tuple[tuple[int, int], ...]  # (width, height) of each image, from its header
    length: int                         # prompt tokens: chat format and image tokens included


def image_paths(record: Mapping, image_root: str | os.PathLike) -> tuple[Path, ...]:
    """The record's image paths, relative ones under ``image_root``; ValueError, one
    sentence, when its ``image`` is neither a path nor a list of paths."""
    images = record.get("image") or []
    images = [images] if isinstance(images, str) else images
    if not isinstance(images, list) or not all(isinstance(p, str) and p for p in images):
        raise ValueError("record image must be a list of non-empty str paths (or one str)")
    return tuple(Path(p) if Path(p).is_absolute() else Path(image_root) / p for p in images)


def prepare(planner: Any, records: Sequence[Any], image_root: str | os.PathLike,
            indices: Sequence[int] | None = None) -> tuple[dict[int, Job], dict[int, str]]:
    """Jobs, and errors (one sentence each), by input index, for ``records`` (or only those
    at ``indices``)."""
    jobs, errors = {}, {}
    for i in range(len(records)) if indices is None else indices:
        try:
            jobs[i] = _job(planner, records[i], i, image_root)
        except (ValueError, TypeError) as exc:          # ImageFileError, PromptTooLong too
            errors[i] = str(exc)
    return jobs, errors


def _job(planner: Any, record: Any, index: int, image_root: str | os.PathLike) -> Job:
    if not isinstance(record, Mapping):
        raise ValueError(f"record must be a JSON object, got {type(record).__name__}")
    request = ask(planner, record)
    paths = image_paths(record, image_root)
    if not paths:
        raise ValueError("the record has no image")
    sizes = tuple(image_size(p) for p in paths)
    length = planner.prompt_length(request.prompt, sizes)   # from the headers' sizes
    budget = planner.answer_positions(request.decode)
    if length + budget > planner.max_positions:
        raise PromptTooLong(length, budget, planner.max_positions)
    return Job(index, request, paths, sizes, length)


def plan_batches(jobs: Mapping[int, Job], batch_size: int) -> list[tuple[int, ...]]:
    """Input indices in batches of at most ``batch_size``: jobs of one decoding group, sorted
    by prompt length (then input order), cut in order; groups in order of first appearance.
    The same jobs always give the same batches."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    groups: dict[tuple, list[Job]] = {}
    for index in sorted(jobs):
        groups.setdefault(jobs[index].ask.group, []).append(jobs[index])
    batches = []
    for members in groups.values():
        members.sort(key=lambda job: (job.length, job.index))
        batches += [tuple(job.index for job in members[start:start + batch_size])
                    for start in range(0, len(members), batch_size)]
    return batches


def decode_batch(planner: Any, records: Sequence[Any], batch: Sequence[Job]) -> list[dict]:
    """Predictions-file objects of one batch's records, in the batch's order."""
    loaded, items = [], {}
    for job in batch:
        try:
            loaded.append((job, [open_rgb(p) for p in job.images]))
        except ImageFileError as exc:
            items[job.index] = prediction_item(records[job.index], job.index, "", str(exc),
                                               {"task": job.ask.task})
    if loaded:
        items.update(_decode_loaded(planner, records, loaded))
    return [items[job.index] for job in batch]


def _decode_loaded(planner: Any, records: Sequence[Any], loaded: list) -> dict[int, dict]:
    first = loaded[0][0].ask
    if first.observation is not None and getattr(planner, "picker", None) is not None:
        return {job.index: _candidates_item(planner, records, job, images)
                for job, images in loaded}
    try:
        rows, stats = planner.generate_rows([job.ask.prompt for job, _ in loaded],
                                            [images for _, images in loaded],
                                            first.decode, first.language)
    except (RuntimeError, ValueError) as exc:           # a kernel, memory or budget failure
        if len(loaded) == 1:
            job = loaded[0][0]
            return {job.index: prediction_item(records[job.index], job.index, "",
                                               f"decoding failed: {exc}",
                                               {"task": job.ask.task})}
        out = {}
        for one in loaded:                                # find the record that fails
            out.update(_decode_loaded(planner, records, [one]))
        return out
    budget = first.decode.max_new_tokens
    out = {}
    for (job, _), row in zip(loaded, rows):
        extra = {"task": job.ask.task, "image_size": list(job.sizes[0]), "tokens": row.tokens,
                 "forwards": stats.forwards, "decode_ms": round(stats.total_ms, 3),
                 "batch_size": len(rows)}
        error = None
        if row.finished:
            extra.update(parsed(job.ask.task, row.text, job.sizes[0]))
        else:
            error = (f"the answer did not end within {budget} tokens (the --max-new-tokens "
                     f"budget)")
            extra["raw_text"] = row.text
        out[job.index] = prediction_item(records[job.index], job.index, row.text, error,
                                         extra)
    return out


def _candidates_item(planner: Any, records: Sequence[Any], job: Job, images: list) -> dict:
    """The predictions-file object of a planning record answered by a planner with K > 1
    candidates: the chosen plan as ``prediction``, the candidates and the selection under
    ``wamdiff2.candidates``."""
    record = records[job.index]
    try:
        cset = planner.plan_candidates(replace(job.ask.observation, images=list(images)))
    except (RuntimeError, ValueError) as exc:
        return prediction_item(record, job.index, "", f"decoding failed: {exc}",
                               {"task": job.ask.task})
    chosen = cset.chosen
    extra = {"task": job.ask.task, "image_size": list(job.sizes[0]),
             "forwards": cset.stats.forwards, "decode_ms": round(cset.stats.total_ms, 3),
             "batch_size": len(cset),
             "candidates": {**cset.selection.to_json(),
                            "texts": [c.text for c in cset.candidates]},
             **parsed(job.ask.task, chosen.text, job.sizes[0])}
    return prediction_item(record, job.index, chosen.text, None, extra)


__all__ = ["Job", "decode_batch", "image_paths", "plan_batches", "prepare"]
