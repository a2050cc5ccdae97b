"""A predictions run over a data set: batched, sharded over torchrun ranks, resumable.

``run_predict`` decodes every record of an input with one planner per process and writes the
reference repository's predictions file (``predictions``). Under torchrun every rank holds
the whole input and computes the same batch plan (``batch_decode.plan_batches``); batch k
goes to rank k mod WORLD_SIZE, so a batch holds the same records whatever the number of
processes and the merged output equals a single process's. Each rank writes every batch it
finishes as a part (``prediction_parts``); rank 0 waits for the others, merges the parts in
input order, writes the output atomically and removes the parts. ``resume`` skips what the
parts (or an earlier output) already hold; batches keep their records, so a resumed run
writes what an uninterrupted one would, and the batches left are dealt out afresh (the j-th
one left to rank j mod WORLD_SIZE), so that no rank waits at the final collectives on
another's share, whichever rank had finished when the first run stopped.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.training.distributed import DistContext

from .batch_decode import decode_batch, plan_batches, prepare
from .prediction_parts import PartsStore
from .predictions import OWN_KEY, dumps_predictions, prediction_item


@dataclass(frozen=True)
class PredictSettings:
    """How a predictions run goes, apart from the planner's decoding settings (which the
    planner holds): one place for the run's knobs."""

    batch_size: int = 1
    resume: bool = False
    progress: bool = True
    warmup: bool = False           # decode each rank's first batch once before the clock starts

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")


@dataclass
class PredictSummary:
    """What a run did: over the whole output (``records``, ``failed``) and over the records
    decoded in this run (the rest were resumed)."""

    records: int = 0
    failed: int = 0
    decoded: int = 0
    resumed: int = 0
    tokens: int = 0
    row_forwards: int = 0          # forwards each decoded answer took part in, summed
    seconds: float = 0.0
    world: int = 1
    batch_size: int = 1
    output: str = ""
    first_error: str | None = None
    decoded_per_rank: list[int] = field(default_factory=list)   # records each rank decoded
    answered: int = 0              # records with a decoded answer (failed ones included)

    @property
    def samples_per_s(self) -> float:
        return self.decoded / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """Answer tokens per forward, per answer (independent of the batch size)."""
        return self.tokens / self.row_forwards if self.row_forwards else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(samples_per_s=round(self.samples_per_s, 3),
                   tokens_per_s=round(self.tokens_per_s, 2),
                   tokens_per_forward=round(self.tokens_per_forward, 3))
        return out

    @property
    def all_failed(self) -> bool:
        """Every record failed (a run with nothing to show: the input or the image paths are
        probably wrong)."""
        return self.records > 0 and self.failed == self.records

    def failure_line(self) -> str | None:
        """Where the errors are, in one sentence; None when no record failed."""
        if not self.failed:
            return None
        return (f"{self.failed} of {self.records} records failed (each has its 'error' in "
                f"{self.output}); the first: {self.first_error}")

    def line(self) -> str:
        """The one-line summary a run ends with."""
        return (f"{self.records} records ({self.decoded} decoded, {self.resumed} resumed), "
                f"{self.failed} failed; {self.tokens} tokens in {self.seconds:.1f} s on "
                f"{self.world} process(es) x batch {self.batch_size}: "
                f"{self.samples_per_s:.2f} samples/s, {self.tokens_per_s:.1f} tokens/s, "
                f"{self.tokens_per_forward:.2f} tokens per forward")


def join_ranks(device: str) -> tuple[DistContext, str]:
    """This process's place among torchrun's ranks (one process without torchrun) and the
    device it decodes on: ``cuda`` becomes this rank's own GPU (LOCAL_RANK)."""
    ctx = DistContext.from_env()
    if device == "cuda" and ctx.device.type == "cuda":
        device = str(ctx.device)
    return ctx, device


def _agree(ctx: DistContext, error: str | None) -> None:
    """Every rank learns rank 0's verdict; all raise its ValueError together."""
    if ctx.active:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise ValueError(error)


def run_predict(planner: Any, records: Sequence[Any], image_root: str | os.PathLike,
                output: str | os.PathLike, settings: PredictSettings,
                manifest: Mapping[str, Any], ctx: DistContext | None = None
                ) -> PredictSummary | None:
    """Decode ``records`` (images under ``image_root``) into the predictions file ``output``.
    Returns the summary on rank 0, None on the other ranks. ValueError, one sentence, when
    the parts folder is in the way, belongs to another input or settings, or holds a part
    that is not one of this input's (nothing is written then). A record that cannot be
    decoded is that record's ``error``, never the run's."""
    ctx = ctx or DistContext()
    store = PartsStore(output, manifest)
    error, done = None, None
    if ctx.is_main:
        try:
            store.open(settings.resume, records)
            done = store.done(records)            # every part readable and of this input
        except (ValueError, OSError) as exc:
            error = str(exc)
    _agree(ctx, error)
    done = store.done(records) if done is None else done
    jobs, errors = prepare(planner, records, image_root)
    mine = share(plan_batches(jobs, settings.batch_size), done, ctx.rank, ctx.world)
    if settings.warmup and mine:                   # graph capture / compilation off the clock
        decode_batch(planner, records, [jobs[i] for i in mine[0]])
    ctx.barrier()
    start = time.perf_counter()
    counts = _decode_shard(planner, records, jobs, mine, store, ctx, settings.progress)
    per_rank = torch.zeros(3 + ctx.world, dtype=torch.float64)
    per_rank[:3] = torch.tensor(counts, dtype=torch.float64)
    per_rank[3 + ctx.rank] = counts[0]
    totals = ctx.sum(per_rank).tolist()
    ctx.barrier()                                  # every part is written
    if not ctx.is_main:
        return None
    items = _merge(records, store.done(records), errors)
    write_atomic(output, dumps_predictions(items, output))
    store.remove()
    failed = [item for item in items if "error" in item]
    return PredictSummary(
        records=len(items), failed=len(failed), decoded=int(totals[0]),
        resumed=len([i for i in done if i not in errors]), tokens=int(totals[1]),
        row_forwards=int(totals[2]), seconds=time.perf_counter() - start, world=ctx.world,
        batch_size=settings.batch_size, output=str(output),
        first_error=_first_error(failed[0]) if failed else None,
        decoded_per_rank=[int(n) for n in totals[3:]],
        answered=sum("forwards" in item[OWN_KEY] for item in items))


def share(batches: Sequence[tuple[int, ...]], done: Mapping[int, Any], rank: int, world: int
          ) -> list[list[int]]:
    """This rank's batches: the batches with records left to decode (a batch is written
    whole, so one is either done or not; an earlier output may have taken some of its
    records), the j-th of them to rank j mod ``world``. A fresh run has every batch left, so
    batch k goes to rank k mod ``world``, as without resume."""
    left = [[i for i in batch if i not in done] for batch in batches]
    left = [batch for batch in left if batch]
    return left[rank::world]


def _first_error(item: Mapping) -> str:
    """The first failed record's error, with the record named."""
    return f"record {item.get('id')!r}: {item['error']}"


def _decode_shard(planner: Any, records: Sequence[Any], jobs: Mapping, batches: list,
                  store: PartsStore, ctx: DistContext, progress: bool) -> list[float]:
    """Decode this rank's batches, writing each as a part; (records, tokens, row forwards)."""
    total = sum(len(b) for b in batches)
    decoded = tokens = row_forwards = 0
    desc = f"predict (rank {ctx.rank} of {ctx.world})" if ctx.active else "predict"
    tic = time.perf_counter()
    with tqdm(total=total, desc=desc, unit="sample", disable=not (progress and ctx.is_main),
              dynamic_ncols=True) as bar:
        for batch in batches:
            items = decode_batch(planner, records, [jobs[i] for i in batch])
            store.write(ctx.rank, items)
            decoded += len(items)
            for item in items:
                own = item["wamdiff2"]
                tokens += own.get("tokens", 0)
                row_forwards += own.get("forwards", 0)
            bar.update(len(items))
            bar.set_postfix_str(f"{tokens / max(time.perf_counter() - tic, 1e-9):.1f} "
                                f"tokens/s")
    return [decoded, tokens, row_forwards]


def _merge(records: Sequence[Any], done: Mapping[int, dict], errors: Mapping[int, str]
           ) -> list[dict]:
    """One object per record in input order: its part, else its preparation error."""
    items = []
    for i, record in enumerate(records):
        if i in done:
            items.append(done[i])
        elif i in errors:
            items.append(prediction_item(record, i, "", errors[i]))
        else:
            raise RuntimeError(f"record {i} has no prediction after every rank finished")
    return items


__all__ = ["PredictSettings", "PredictSummary", "join_ranks", "run_predict", "share"]
