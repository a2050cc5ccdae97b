"""Where training progress goes: a progress bar, ``metrics.csv`` and TensorBoard; and
``ClipWatch``, which warns when the gradient clip binds on nearly every step.

On a terminal the progress bar is tqdm's (loss, tokens/s, samples/s, MFU on GPUs and its
ETA); redirected to a file
it prints one plain line every few seconds instead of carriage-return updates. The CSV keeps
one row per logged step; a resumed run first drops the rows after its checkpoint so the file
holds one continuous curve.
"""
from __future__ import annotations

import csv
import io
import os
import sys
import time
from pathlib import Path

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.training.config import Recipe


def _fmt_eta(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """A progress display for steps ``start..total`` (nothing when disabled)."""

    def __init__(self, total: int, start: int, desc: str, enabled: bool = True,
                 interval_s: float = 10.0, stream=None):
        self.total, self.start, self.desc = total, start, desc
        self.stream = stream or sys.stderr
        self.enabled, self.interval = enabled, interval_s
        self.t0, self.last = time.perf_counter(), 0.0
        self.bar = None
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=start, desc=desc, file=self.stream,
                            dynamic_ncols=True)

    def update(self, step: int, values: dict[str, float]) -> None:
        """Step ``step`` (1-based count of finished steps) is done with these values."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)
            return
        now = time.perf_counter()
        if now - self.last < self.interval and step < self.total:
            return
        self.last = now
        done = step - self.start
        rate = done / max(now - self.t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else 0.0
        vals = " ".join(f"{k} {v:.4g}" for k, v in values.items())
        print(f"{self.desc} step {step}/{self.total} {vals} ETA {_fmt_eta(eta)}",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


METRICS_MAX_BYTES = 2 << 30        # a row is about 200 bytes: ten million steps


class MetricsLog:
    """Rows of scalars to ``metrics.csv`` and (optionally) TensorBoard under ``out/tb``."""

    def __init__(self, out_dir: str | Path, tensorboard: bool = True, resume_step: int = 0):
        self.path = Path(out_dir) / "metrics.csv"
        self.fields: list[str] | None = None
        rows = []
        if self.path.exists() and resume_step > 0:
            from wamdiff2_core.user_files import read_text

            # the run's own file, but in a folder a user can reach: no FIFO, a size cap
            reader = csv.DictReader(io.StringIO(read_text(self.path, "metrics file",
                                                          METRICS_MAX_BYTES), newline=""))
            self.fields = reader.fieldnames
            rows = [r for r in reader if _whole(r) and int(r["step"]) <= resume_step]
        text = io.StringIO(newline="")
        if self.fields:
            w = csv.DictWriter(text, self.fields)
            w.writeheader()
            w.writerows(rows)
        write_atomic(self.path, text.getvalue().encode())     # all rows or the old file
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(Path(out_dir) / "tb"), purge_step=resume_step + 1
                                        if resume_step else None)

    def log(self, step: int, values: dict[str, float]) -> None:
        row = {"step": step, **values}
        new = self.fields is None
        if new:
            self.fields = list(row)
        text = io.StringIO(newline="")
        w = csv.DictWriter(text, self.fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)
        with self.path.open("ab", buffering=0) as f:
            end = f.seek(0, os.SEEK_END)
            data = memoryview(text.getvalue().encode())
            try:
                while data:
                    data = data[f.write(data):]
            except BaseException:      # a full disk: no half row is left behind
                f.truncate(end)
                raise
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(f"train/{k}", v, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _whole(row: dict) -> bool:
    """A csv row with every field present and a numeric step (not a cut-off last line)."""
    if None in row.values() or None in row:
        return False
    try:
        int(row["step"])
    except (KeyError, ValueError):
        return False
    return True


def read_metrics(out_dir: str | Path) -> list[dict[str, float]]:
    """The rows of ``out_dir/metrics.csv`` as floats."""
    with (Path(out_dir) / "metrics.csv").open() as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


class ClipWatch:
    """Says once, after the first ``window`` steps of a run, when the gradient clip bound
    on nearly all of them in a diffusion-stage run whose batches are length-bucketed.

    A clipped step moves the weights by the same length whatever its gradient's norm, so
    each batch weighs 1 / its norm. Length buckets make that weight depend on the answers:
    on the simulator's detection data the shortest bucket is 77% ``[]`` answers with about
    half the gradient norm of the others, and block-32 conversions trained so (a box target
    on: norms ~90 against a clip of 1) learnt to answer ``[]`` to frames with cars
    (docs/training.md, "Length buckets under a clip that always binds"). AR runs under the
    same clip kept the data's rate of empty answers, so they are not watched."""

    def __init__(self, recipe: Recipe, window: int = 50, share: float = 0.9):
        d, clip = recipe.data, recipe.optim.grad_clip
        self.clip, self.bucket, self.window, self.share = clip, d.length_bucket, window, share
        self.active = (recipe.objective != "ar" and clip > 0 and d.group_by_task
                       and d.length_bucket > 0)
        self.seen = self.over = 0

    def observe(self, grad_norm: float) -> str | None:
        """Counts one step's gradient norm (before clipping); the warning, once, or None."""
        if not self.active:
            return None
        self.seen += 1
        self.over += grad_norm > self.clip
        if self.seen < self.window:
            return None
        self.active = False
        if self.over < self.share * self.seen:
            return None
        return (f"the gradient norm was above optim.grad_clip={self.clip:g} on "
                f"{self.over} of the first {self.seen} steps, so every step is scaled to "
                f"the same length and each length-bucketed batch (data.length_bucket="
                f"{self.bucket}) weighs 1 / its norm: batches of short answers, detection's "
                f"'[]' among them, count more than long ones, which taught block-32 "
                f"conversions to answer '[]' (docs/training.md, \"Length buckets under a "
                f"clip that always binds\"); optim.grad_clip=0 (or above the run's norms) "
                f"or data.length_bucket=0 avoids it")
