"""`wamdiff2 bench predict`: `wamdiff2 predict`'s throughput at several batch sizes and process
counts on the same records, each configuration a real predictions run whose own summary
gives samples/s and tokens/s (one process: in this process, the model loaded once; several:
`predict` under torchrun); each run decodes its first batch once before its clock starts.
The answers of every configuration are compared with the first one's (batched answers must
equal batch 1's).

CPU mode (default): a checkpoint (the bundled model) on held-out records (``--data``, or
fresh simulator episodes of a seed no training run used). GPU mode (``--gpu``): the 2B shape
with random weights on synthetic planning records, bf16, CUDA graphs.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from wamdiff2_core.apps.common import CliError, add_decode_options, subgroup

CPU_CONFIGS = "1x1,1x4,1x16,2x8"
GPU_CONFIGS = "1x1,1x32,1x128"
GPU_PRESET = "qwen3-vl-2b"


def register(subparsers) -> None:
    bench = subgroup(subparsers, "bench")
    p = bench.add_parser("predict", help="wamdiff2 predict's samples/s and tokens/s per batch "
                                         "size and process count")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR", help="default: the bundled model")
    src.add_argument("--preset", metavar="NAME", help="an untrained model of a named shape")
    p.add_argument("--data", metavar="PATH",
                   help="records file or data set directory (default: fresh simulator "
                        "episodes, seed 4242; with --gpu: synthetic planning records)")
    p.add_argument("--records", type=int, default=None, metavar="N",
                   help="the first N records (default 64; 256 with --gpu)")
    p.add_argument("--configs", default=None, metavar="PxB,...",
                   help=f"processes x batch size per run (default {CPU_CONFIGS}; "
                        f"{GPU_CONFIGS} with --gpu)")
    p.add_argument("--first-records", type=int, default=None, metavar="N",
                   help="the first configuration decodes only the first N records (batch 1 "
                        "is the slowest: a shorter check of the larger batches' answers)")
    p.add_argument("--gpu", action="store_true",
                   help=f"GPU mode: --preset {GPU_PRESET} (random weights), --device cuda, "
                        f"bf16, CUDA graphs, synthetic records")
    p.add_argument("--device", default=None, help="torch device (default: cpu; cuda with --gpu)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: float32; "
                                                 "bfloat16 with --gpu)")
    p.add_argument("--image-size", default="320x180", metavar="WxH",
                   help="synthetic images' size (default 320x180)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads per process (default: the cores shared out)")
    p.add_argument("--timeout", type=float, default=1800, metavar="S",
                   help="longest a configuration may run (default 1800 s)")
    add_decode_options(p, ("block_size", "max_new_tokens", "constrained"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_bench_predict)


def parse_configs(text: str) -> list[tuple[int, int]]:
    """``"1x1,2x8"`` -> [(1, 1), (2, 8)]: (processes, batch size) pairs."""
    out = []
    for part in text.split(","):
        try:
            procs, batch = (int(v) for v in part.strip().lower().split("x"))
        except ValueError:
            raise CliError(f"--configs: {part!r} is not PROCESSESxBATCH (e.g. 2x8)") from None
        if procs < 1 or batch < 1:
            raise CliError(f"--configs: {part!r} needs at least 1 process and batch 1")
        out.append((procs, batch))
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _input(args, folder: Path, n: int) -> Path:
    """The records file the runs read: the first ``n`` records of ``--data``, of fresh
    simulator episodes, or (GPU mode) synthetic planning records."""
    from wamdiff2_core.tasks.inputs import read_input

    if args.data:
        try:                        # image paths by predict's rule (docs/evaluation.md)
            data = read_input(args.data, None, "--data")
        except ValueError as exc:
            raise CliError(str(exc)) from None
        records = [_absolute(r, data.image_root.path) for r in data.records[:n]]
    elif args.gpu:
        records = _synthetic(folder, n, args.image_size)
    else:
        records = _held_out(folder, n)
    path = folder / "records.json"
    path.write_text(json.dumps(records))
    return path


def _absolute(record: dict, root: Path) -> dict:
    images = record.get("image") or []
    images = [images] if isinstance(images, str) else images
    return {**record, "image": [str(root / p) if not Path(p).is_absolute() else p
                                for p in images]}


def _held_out(folder: Path, n: int) -> list[dict]:
    from wamdiff2_core.apps.bench.decode import HELDOUT_SEED
    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, generate

    frames = 8
    episodes = -(-n // (3 * frames))                  # three records (tasks) per frame
    generate(folder / "sim", GeneratorConfig(episodes=episodes, seed=HELDOUT_SEED,
                                             episode=EpisodeConfig(frames=frames)),
             progress=False)
    records = json.loads((folder / "sim" / "train.json").read_text())[:n]
    return [_absolute(r, folder / "sim") for r in records]


def _synthetic(folder: Path, n: int, size: str) -> list[dict]:
    from PIL import Image

    from wamdiff2_core.apps.bench.decode import synthetic_samples
    from wamdiff2_core.sim.camera import parse_resolution
    from wamdiff2_core.tasks import conversation_record

    try:
        width, height = parse_resolution(size)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    (folder / "images").mkdir()
    records = []
    for i, sample in enumerate(synthetic_samples(n, (width, height))):
        path = folder / "images" / f"{i:05d}.png"
        Image.fromarray(sample.images[0]).save(path)
        records.append(conversation_record(f"synthetic_{i:05d}", [str(path)], sample.prompt,
                                           None, "planning"))
    return records


def _first(input_path: Path, count: int) -> Path:
    """A records file beside ``input_path`` holding its first ``count`` records."""
    path = input_path.with_name(f"first{count}.json")
    path.write_text(json.dumps(json.loads(input_path.read_text())[:count]))
    return path


def _threads(args, procs: int) -> int:
    """CPU threads per process: --threads, else the cores shared out."""
    return args.threads or max(1, (os.cpu_count() or 1) // procs)


def _command(args, procs: int, batch: int, input_path: Path, output: Path) -> list[str]:
    """A several-process configuration: `predict` under torchrun on its own free port."""
    cmd = [str(Path(sys.executable).parent / "torchrun"), f"--nproc-per-node={procs}",
           f"--master-port={_free_port()}", "-m", "wamdiff2_core.cli", "predict",
           "--input", str(input_path), "--output", str(output), "--batch-size", str(batch),
           "--warmup", "--no-progress", "--json", "--threads", str(_threads(args, procs)),
           "--device", _device(args)]
    cmd += (["--checkpoint", args.checkpoint] if args.checkpoint else
            ["--preset", args.preset or GPU_PRESET] if (args.preset or args.gpu) else [])
    cmd += ["--dtype", _dtype(args)] if _dtype(args) else []
    cmd += ["--max-new-tokens", str(args.max_new_tokens)] if args.max_new_tokens else []
    cmd += ["--block-size", str(args.block_size)] if args.block_size else []
    if args.constrained is not None:
        cmd += ["--constrained" if args.constrained else "--no-constrained"]
    return cmd


def _run(cmd: list[str], timeout: float) -> dict:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired:
        raise CliError(f"a run took longer than --timeout {timeout:g} s: "
                       f"{' '.join(cmd)}") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise CliError(f"{' '.join(cmd)} failed with exit code {proc.returncode}: "
                       f"{tail[0]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _planner(args):
    """The planner single-process configurations share (loaded once)."""
    from wamdiff2_core.apps.common import check_model_source, decode_config
    from wamdiff2_core.model.modeling import CheckpointError
    from wamdiff2_core.planner import Planner, PlannerConfig

    source = args.checkpoint or args.preset or (GPU_PRESET if args.gpu else None)
    check_model_source(args.checkpoint)
    try:
        return Planner.from_pretrained(source, PlannerConfig(decode_config(args)),
                                       device=_device(args), dtype=_dtype(args))
    except (CheckpointError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _device(args) -> str:
    return args.device or ("cuda" if args.gpu else "cpu")


def _dtype(args) -> str | None:
    return args.dtype or ("bfloat16" if args.gpu else None)


def _in_process(planner, input_path: Path, output: Path, batch: int) -> dict:
    """One single-process configuration, in this process (the model stays loaded)."""
    from wamdiff2_core.evaluation.predict_run import PredictSettings, run_predict
    from wamdiff2_core.tasks import read_records

    settings = PredictSettings(batch_size=batch, progress=False, warmup=True)
    summary = run_predict(planner, read_records(input_path), input_path.parent, output,
                          settings, manifest={})
    return summary.to_dict()


def run_bench_predict(args: argparse.Namespace) -> int:
    from wamdiff2_core.apps.common import apply_threads

    configs = parse_configs(args.configs or (GPU_CONFIGS if args.gpu else CPU_CONFIGS))
    n = args.records or (256 if args.gpu else 64)
    if n < 1:
        raise CliError("--records must be at least 1")
    if args.first_records is not None and not 1 <= args.first_records <= n:
        raise CliError(f"--first-records must be in 1..{n} (the records decoded)")
    rows, answers, planner = [], [], None
    with tempfile.TemporaryDirectory(prefix="wamdiff2-bench-predict-") as tmp:
        folder = Path(tmp)
        input_path = _input(args, folder, n)
        for k, (procs, batch) in enumerate(configs):
            output = folder / f"p{procs}x{batch}.json"
            inputs = input_path if k or args.first_records is None else \
                _first(input_path, args.first_records)
            if procs == 1:
                apply_threads(_threads(args, 1))
                planner = planner or _planner(args)
                summary = _in_process(planner, inputs, output, batch)
            else:
                summary = _run(_command(args, procs, batch, inputs, output), args.timeout)
            items = json.loads(output.read_text())
            answers.append([item["prediction"] for item in items])
            differ = sum(a != b for a, b in zip(answers[0], answers[-1]))
            compared = min(len(answers[0]), len(answers[-1]))
            rows.append({"processes": procs, "batch_size": batch,
                         "records": summary["records"], "failed": summary["failed"],
                         "seconds": round(summary["seconds"], 3),
                         "samples_per_s": summary["samples_per_s"],
                         "tokens_per_s": summary["tokens_per_s"],
                         "tokens_per_forward": summary["tokens_per_forward"],
                         "answers_differing_from_first": differ,
                         "answers_compared": compared})
    report = {"mode": "gpu" if args.gpu else "cpu", "device": _device(args),
              "dtype": _dtype(args) or "float32", "records": n, "configs": rows,
              "source": args.checkpoint or args.preset or (GPU_PRESET if args.gpu
                                                           else "bundled model"),
              "data": args.data or ("synthetic planning records" if args.gpu
                                    else "simulator episodes, seed 4242")}
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0


def format_table(report: dict) -> str:
    """The report as one aligned table, speed relative to the first configuration."""
    lines = [f"bench predict ({report['mode']} mode, {report['device']}, {report['dtype']}): "
             f"{report['source']} on {report['records']} records of {report['data']}",
             f"{'processes x batch':>18} {'samples/s':>10} {'tokens/s':>10} {'x first':>8} "
             f"{'tok/fwd':>8} {'failed':>7} {'answers != first':>17}"]
    first = report["configs"][0]["tokens_per_s"] or 1.0
    for r in report["configs"]:
        lines.append(f"{r['processes']:>8} x {r['batch_size']:<7} {r['samples_per_s']:>10.2f} "
                     f"{r['tokens_per_s']:>10.1f} {r['tokens_per_s'] / first:>7.2f}x "
                     f"{r['tokens_per_forward']:>8.2f} {r['failed']:>7} "
                     f"{_differ(r):>17}")
    return "\n".join(lines)


def _differ(row: dict) -> str:
    """'differing of compared' answers, e.g. '0 of 16'."""
    return f"{row['answers_differing_from_first']} of {row.get('answers_compared', '?')}"
