"""GPU check of issue 44 (scripts/gpu_check.sh, step `fsdp`): FSDP2 steps of the 2B shape on
one GPU (bf16, activation checkpointing, one ~2K-token sample per step), the allocator's peak
against the memory plan's estimate for that sample, and the step time.

    python scripts/fsdp_gpu_step.py OUT_DIR [--preset qwen3-vl-2b] [--pixels 1843200]
        [--steps 4] [--image 1920x1080]

Writes OUT_DIR/fsdp_step.json and prints it; the run itself is under OUT_DIR/run. On a
machine without a GPU it runs too (``--preset tiny --pixels 16384 --steps 2 --image 320x180``:
the CPU dry run of scripts/gpu_check.sh), with no peak to compare. The first step includes
the warm-up; the last step's time is the one to read.
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

PIXELS = 1_843_200          # 1920 x 960 after resizing: 7,200 patches, 1,800 image tokens


def main(out: Path, preset: str, pixels: int, steps: int = 4,
         image: tuple[int, int] = (1920, 1080)) -> int:
    data, run = out / "data", out / "run"
    wamdiff2 = ["-m", "wamdiff2_core.cli"]
    write_data(data, steps, image)
    overrides = [f"model.init={preset}", f"model.max_pixels={pixels}", f"data.path={data}",
                 "data.max_answer_tokens=96", "data.length_bucket=0", "data.task_weights={}",
                 "train.strategy=fsdp", "train.activation_checkpointing=true",
                 "train.precision=bf16", "train.global_batch=1", "train.micro_batch=1",
                 f"train.steps={steps}", "optim.warmup_steps=0", "output.save_every=1000",
                 "output.log_every=1", "output.tensorboard=false", f"output.dir={run}"]
    subprocess.run(torchrun() + ["--nproc_per_node", "1", "--master_addr", "127.0.0.1",
                                 "--master_port", str(free_port())] + wamdiff2
                   + ["train", "--config", "block32.yaml"] + overrides, check=True)
    memory = json.loads((run / "memory.json").read_text())["ranks"][0]
    rows = json_rows(run / "metrics.csv")
    tokens = rows[-1]["tokens_per_s"] / rows[-1]["samples_per_s"]       # per sample
    from wamdiff2_core.training.config import find_recipe, load_recipe
    from wamdiff2_core.training.memory import (PlanSetup, activation_bytes, load_shape,
                                               plan, workload_for)

    recipe = load_recipe(find_recipe("block32.yaml"), overrides)
    shape = load_shape(preset)
    setup = PlanSetup("fsdp", 1, 0, True, "bf16", 1)
    work = workload_for(recipe, shape, setup, tokens=round(tokens), image_pixels=pixels)
    planned = plan(shape, None, setup, work)
    result = {"date": datetime.date.today().isoformat(), "shape": preset,
              "tokens_per_sample": tokens, "peak_bytes": memory["measured"]["peak"],
              "planned_bytes": planned.total(True),
              "planned_activation_bytes": activation_bytes(shape, work, True),
              "peak_over_plan": memory["measured"]["peak"] / planned.total(True) or None,
              "step_seconds": [1.0 / r["samples_per_s"] for r in rows],
              "tokens_per_s": rows[-1]["tokens_per_s"],
              "mfu": [r.get("mfu") for r in rows], "measured": memory["measured"],
              "planned_items": planned.items}
    (out / "fsdp_step.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


def write_data(folder: Path, frames: int = 4, size: tuple[int, int] = (1920, 1080)) -> None:
    """Planning records on noise images of ``size`` (width, height; no simulator needed on a
    GPU machine)."""
    import numpy as np
    from PIL import Image

    from wamdiff2_core import tasks

    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    records = []
    for k in range(frames):
        name = f"images/{k:03d}.png"
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(
            folder / name)
        waypoints = np.cumsum(rng.uniform(1, 3, (8, 2)) * [1, 0.1], axis=0)
        records.append(tasks.conversation_record(
            k, [name], tasks.planning_prompt("straight", (8.0, 0.0), (0.1, 0.0)),
            tasks.format_waypoints(waypoints), "planning"))
    (folder / tasks.RECORDS_FILE).write_text(json.dumps(records))


def torchrun() -> list[str]:
    """torchrun beside this interpreter, else its module (an image whose python3 is not in the
    environment's bin folder)."""
    exe = Path(sys.executable).parent / "torchrun"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def json_rows(path: Path) -> list[dict]:
    import csv

    with path.open() as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="gpu_out/fsdp")
    parser.add_argument("--preset", default="qwen3-vl-2b")
    parser.add_argument("--pixels", type=int, default=PIXELS)
    parser.add_argument("--steps", type=int, default=4, help="training steps (default 4)")
    parser.add_argument("--image", default="1920x1080", help="noise images' WIDTHxHEIGHT")
    a = parser.parse_args()
    width, height = (int(v) for v in a.image.lower().split("x"))
    sys.exit(main(Path(a.out), a.preset, a.pixels, a.steps, (width, height)))
