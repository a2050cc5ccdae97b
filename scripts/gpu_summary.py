"""The summary of scripts/gpu_check.sh: one table (the device, its driver, torch; each step ok,
failed or skipped, with its figure) printed and written to OUT/summary.md, ready to paste into
docs/benchmarks.md, and the same as OUT/summary.json with each step's figures and raw output.

    python scripts/gpu_summary.py WORK OUT --steps "tests decode ..." [--budget-total S]
        [--dry-run 0|1] [--bundled-tpf 7.64] [--bundled-exact-tpf 5.40]

WORK holds what gpu_check.sh left: steps.tsv (name, exit status, seconds, budget, skip
reason) and each step's NAME.out / NAME.err (node.json, fsdp/fsdp_step.json). Exits 1 when
a step failed, 0 otherwise (skips are not failures: each says why).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

TEST_STEPS = ("tests", "fi-tests", "compile-tests", "tests-all")
DECODE_STEPS = ("decode", "fi-decode", "compile-decode")
TIMED_OUT = (124, 137)


def read_steps(work: Path) -> dict[str, dict]:
    """steps.tsv as name -> {rc, seconds, budget_s, reason}."""
    out = {}
    path = work / "steps.tsv"
    for line in path.read_text().splitlines() if path.exists() else []:
        name, rc, seconds, budget, reason = (line.split("\t") + [""] * 5)[:5]
        out[name] = {"rc": int(rc), "seconds": int(seconds), "budget_s": int(budget),
                     "reason": reason or None}
    return out


def read_json(path: Path) -> dict | None:
    """The last JSON object a step printed (or wrote), None if there is none."""
    if not path.exists():
        return None
    text = path.read_text().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = text.rfind("\n{")
        try:
            return json.loads(text[start + 1:]) if start >= 0 else None
        except json.JSONDecodeError:
            return None


def tests_result(work: Path, name: str) -> dict:
    """Counts from pytest's closing line and the first skip reason (pytest -ra)."""
    path = work / f"{name}.out"
    text = path.read_text() if path.exists() else ""
    counts = {k: int(n) for n, k in re.findall(
        r"(\d+) (passed|failed|skipped|errors?|deselected)", text.splitlines()[-1]
        if text.strip() else "")}
    skip = re.search(r"^SKIPPED \[\d+\] [^:]+:\d+: (.+)$", text, re.M)
    figure = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no tests ran"
    out = {"figure": figure, "figures": counts}
    if not counts.get("passed") and counts.get("skipped") and not counts.get("failed"):
        out["skipped"] = f"{counts['skipped']} selected tests collected and skipped: " + (
            skip.group(1) if skip else "see the log")
    elif counts.get("failed") or counts.get("error") or counts.get("errors"):
        out["failed"] = figure
    return out


def decode_result(report: dict, bundled_tpf: float, bundled_exact_tpf: float) -> dict:
    """Latencies, measured tokens/s and the projections at the bundled model's tokens per
    forward (diffusion: bench decode's own projection from the block step; exact: the
    bundled model's exact tokens per forward over this run's exact ms per forward)."""
    mode, lat = next(iter(report["latency_ms"].items()))
    decoders = report["decoders"]
    f = {"mode": mode, "attention": lat.get("attention"),
         "ar_step_ms": lat["ar_step"], "block_step_ms": lat["block_step"],
         "first_step_ms": lat.get("first_step"), "exact_verify_ms": lat.get("exact_verify")}
    for key, name in (("ar", "ar_optimised"), ("diffusion", "diffusion_fast"),
                      ("reference", "diffusion_reference"), ("exact", "exact_fast")):
        if name in decoders:
            f[f"{key}_tokens_per_s"] = decoders[name]["tokens_per_s"]
            f[f"{key}_tokens_per_forward"] = decoders[name]["tokens_per_forward"]
    projection = (report.get("projection") or {}).get(mode)
    if projection:
        f["bundled_tpf"] = bundled_tpf
        f["diffusion_tokens_per_s_at_bundled_tpf"] = projection["diffusion_tokens_per_s"]
    if "exact_fast" in decoders:
        f["bundled_exact_tpf"] = bundled_exact_tpf
        f["exact_tokens_per_s_at_bundled_tpf"] = (
            bundled_exact_tpf * 1e3 / max(decoders["exact_fast"]["ms_per_forward"], 1e-9))
    if "fast_matches_reference" in report:
        f["fast_matches_reference"] = report["fast_matches_reference"]
    return {"figure": decode_figure(f), "figures": f}


def decode_figure(f: dict) -> str:
    parts = [f"{f['mode']}: AR step {f['ar_step_ms']:.2f} ms, block step "
             f"{f['block_step_ms']:.2f} ms"]
    own = [f"{k} {f[f'{k}_tokens_per_s']:.0f} ({f[f'{k}_tokens_per_forward']:.2f} tok/fwd)"
           for k in ("ar", "diffusion", "exact") if f"{k}_tokens_per_s" in f]
    parts.append("tokens/s at its own tokens/forward: " + ", ".join(own))
    at = []
    if "diffusion_tokens_per_s_at_bundled_tpf" in f:
        at.append(f"diffusion {f['diffusion_tokens_per_s_at_bundled_tpf']:.0f} "
                  f"({f['bundled_tpf']:.2f})")
    if "exact_tokens_per_s_at_bundled_tpf" in f:
        at.append(f"exact {f['exact_tokens_per_s_at_bundled_tpf']:.0f} "
                  f"({f['bundled_exact_tpf']:.2f})")
    if at:
        parts.append("at the bundled model's: " + ", ".join(at))
    return "; ".join(parts)


def predict_result(report: dict) -> dict:
    rows = report["configs"]
    figure = "; ".join(f"batch {r['batch_size']}: {r['samples_per_s']:.2f} samples/s, "
                       f"{r['tokens_per_s']:.0f} tokens/s" for r in rows)
    differ = [r for r in rows[1:] if r["answers_differing_from_first"]]
    figure += "; answers equal to batch 1's: " + (
        "yes" if not differ else ", ".join(
            f"{r['answers_differing_from_first']} of {r.get('answers_compared')} differ at "
            f"batch {r['batch_size']}" for r in differ))
    out = {"figure": figure, "figures": {"configs": rows}}
    if differ:
        out["failed"] = "answers differ from batch 1's"
    return out


def node_result(result: dict) -> dict:
    def ms(p: dict, keys=("p50", "p95", "p99")) -> str:
        return " / ".join(f"{p[k]:.1f}" for k in keys if p.get(k) is not None) + " ms"
    bare = result["planner_ms"]
    keys = [k for k in ("p50", "p95", "p99") if bare.get(k) is not None]
    figure = f"bare planner {'/'.join(keys)} {ms(bare)}"
    node = result.get("node")
    if node:
        path = node["node_image_to_path_ms"]
        figure = (f"node image -> Path p50/p95 {ms(path, ('p50', 'p95'))}" if path["n"] else
                  "node: no Path from the model (fallbacks only)") + "; " + figure
    else:
        figure = f"node not timed ({result['node_skipped']}); " + figure
    out = {"figure": figure, "figures": result}
    if not node:
        out["skipped"] = f"{result['node_skipped']}: the node was not timed, the bare planner was"
    return out


def fsdp_result(result: dict) -> dict:
    gib = 2 ** 30
    last = result["step_seconds"][-1]
    mfu = result["mfu"][-1] if result.get("mfu") else None
    f = {"step_seconds": last, "tokens_per_s": result.get("tokens_per_s"), "mfu": mfu,
         "peak_gib": result["peak_bytes"] / gib if result.get("peak_bytes") else None,
         "planned_gib": result["planned_bytes"] / gib,
         "peak_over_plan": result.get("peak_over_plan"),
         "tokens_per_sample": result["tokens_per_sample"]}
    figure = f"step {last:.2f} s, {f['tokens_per_s'] or 0:.0f} tokens/s, MFU " + (
        f"{mfu:.1%}" if mfu is not None else "n/a") + ", peak " + (
        f"{f['peak_gib']:.2f} GiB" if f["peak_gib"] is not None else "n/a (no GPU)") + \
        f" against {f['planned_gib']:.2f} GiB planned"
    return {"figure": figure, "figures": f}


def step_result(name: str, work: Path, rec: dict | None, a: argparse.Namespace) -> dict:
    """One step's entry: status (ok, failed, skipped), reason, figure, figures, raw."""
    base = {"name": name, "status": "failed", "reason": None, "figure": "", "figures": {}}
    if rec is None:
        return base | {"reason": "no record: the check stopped before this step"}
    base |= {"seconds": rec["seconds"], "budget_s": rec["budget_s"]}
    if rec["rc"] in TIMED_OUT:
        return base | {"status": "skipped", "reason": rec["reason"]}
    if rec["reason"]:                      # a skip the shell decided (wheels)
        return base | {"status": "skipped", "reason": rec["reason"]}
    try:
        got = parse_step(name, work, a)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        got = {"failed": f"its output could not be read ({type(exc).__name__}: {exc})"}
    if rec["rc"] != 0 and not (name in TEST_STEPS and "failed" in got):
        # a test step's own count says more; any other step's last error line says most
        got["failed"] = f"exit status {rec['rc']}: " + last_line(work / f"{name}.err",
                                                                  work / f"{name}.out")
    status = "failed" if "failed" in got else "skipped" if "skipped" in got else "ok"
    return base | {"status": status, "reason": got.get("failed") or got.get("skipped"),
                   "figure": got.get("figure", ""), "figures": got.get("figures", {}),
                   "raw": got.get("raw")}


def parse_step(name: str, work: Path, a: argparse.Namespace) -> dict:
    if name == "wheels":
        names = (work / "wheels.txt").read_text().split()
        return {"figure": f"{len(names)} wheels installed", "figures": {"wheels": names}}
    if name in TEST_STEPS:
        return tests_result(work, name)
    sources = {"predict": work / "predict.out", "node": work / "node.json",
               "fsdp": work / "fsdp" / "fsdp_step.json"}
    raw = read_json(sources.get(name, work / f"{name}.out"))
    if raw is None:
        return {"failed": "it printed no JSON report: " + last_line(work / f"{name}.err")}
    if name in DECODE_STEPS:
        got = decode_result(raw, a.bundled_tpf, a.bundled_exact_tpf)
    else:
        got = {"predict": predict_result, "node": node_result, "fsdp": fsdp_result}[name](raw)
    return got | {"raw": raw}


def last_line(*paths: Path) -> str:
    """The last line of the first of ``paths`` that holds any (pytest reports to stdout)."""
    for path in paths:
        lines = path.read_text().strip().splitlines() if path.exists() else []
        if lines:
            return lines[-1][:300]
    return "(no output)"


def environment(dry_run: bool) -> dict:
    """The device, its driver, torch (and its CUDA), transformers, Python, the date."""
    import torch
    import transformers

    env = {"date": datetime.date.today().isoformat(), "python": platform.python_version(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "dry_run": dry_run}
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gib"] = torch.cuda.get_device_properties(0).total_memory / 2 ** 30
    else:
        env["device"] = f"CPU ({platform.machine()}, no CUDA)"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        env["driver"] = None
    return env


def markdown(summary: dict) -> str:
    e = summary["environment"]
    took = sum(s.get("seconds", 0) for s in summary["steps"])
    lines = [f"{e['device']}, driver {e['driver'] or 'n/a'}, torch {e['torch']} (CUDA "
             f"{e['cuda'] or 'n/a'}), transformers {e['transformers']}, Python {e['python']}, "
             f"{e['date']}{' (dry run: tiny preset, CPU)' if e['dry_run'] else ''}: "
             f"`{summary['command']}`, steps took {took} s of a "
             f"{summary['budget_total_s']} s budget.", "",
             "| step | status | figure | seconds (budget) |", "|---|---|---|---|"]
    for s in summary["steps"]:
        text = s["figure"]
        if s["reason"]:
            text = f"{text} ({s['reason']})" if text else s["reason"]
        lines.append(f"| {s['name']} | {s['status']} | {text.replace('|', '/')} | "
                     f"{s.get('seconds', '-')} ({s.get('budget_s', '-')}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", required=True)
    p.add_argument("--budget-total", type=int, default=None)
    p.add_argument("--dry-run", type=int, default=0)
    p.add_argument("--bundled-tpf", type=float, default=7.64)
    p.add_argument("--bundled-exact-tpf", type=float, default=5.40)
    p.add_argument("--command", default="bash scripts/gpu_check.sh", help="what ran")
    a = p.parse_args(argv)
    records = read_steps(a.work)
    steps = [step_result(n, a.work, records.get(n), a) for n in a.steps.split()]
    summary = {"environment": environment(bool(a.dry_run)), "command": a.command,
               "budget_total_s": a.budget_total, "limit_s": 480, "steps": steps}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    table = markdown(summary)
    (a.out / "summary.md").write_text(table)
    print("\n" + table)
    return 1 if any(s["status"] == "failed" for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
