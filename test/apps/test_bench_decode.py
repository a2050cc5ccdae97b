"""`wamdiff2 bench decode`: the report's numbers and their meaning, data-set prompts with L2,
user errors as one sentence."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wamdiff2_core import tasks
from wamdiff2_core.apps.bench.decode import Sample, data_samples, paired_l2, planning_l2
from wamdiff2_core.apps.cli import main

WAMDIFF2 = [str(Path(sys.executable).parent / "wamdiff2")]
TINY = ["bench", "decode", "--preset", "tiny", "--block-size", "4", "--max-new-tokens", "8",
        "--samples", "2", "--batch", "2", "--threads", "1", "--no-constrained", "--repeats", "1"]


def test_planning_l2_averages_parsed_answers_and_counts_failures():
    truth = np.zeros((8, 2))
    samples = [Sample("p", [], truth), Sample("p", [], truth), Sample("p", [], None)]
    shifted = tasks.format_waypoints(np.full((8, 2), 3.0) * [1.0, 4 / 3])   # 3-4-5: 5 m off
    out = planning_l2([shifted, "not a plan", shifted], samples)
    assert out["samples"] == 2 and out["parse_failures"] == 1
    assert out["l2_avg"] == pytest.approx(5.0) and out["l2_at_1s"] == pytest.approx(5.0)
    assert planning_l2(["x"], [Sample("p", [], None)]) is None


def test_paired_l2_compares_the_frames_where_both_plans_parse():
    """A decoder that fails its hard frame is compared on the easy one only, as is the other
    decoder: frame 1 (where the first decoder's answer does not parse) counts for neither."""
    truth = np.zeros((8, 2))
    samples = [Sample("p", [], truth), Sample("p", [], truth), Sample("p", [], None)]
    one = tasks.format_waypoints(np.full((8, 2), [1.0, 0.0]))               # 1 m off
    far = tasks.format_waypoints(np.full((8, 2), [9.0, 0.0]))               # 9 m off
    out = paired_l2([one, "garbage", one], [one, far, far], samples)
    assert out == {"samples": 1, "l2_avg_a": pytest.approx(1.0), "l2_avg_b": pytest.approx(1.0)}
    assert paired_l2(["garbage"], [one], samples[:1]) is None


def write_data_set(root: Path, n: int = 2) -> Path:
    (root / "images").mkdir(parents=True)
    records = []
    for i in range(n):
        Image.fromarray(np.full((36, 64, 3), 40 * i, np.uint8)).save(root / f"images/{i}.png")
        future = np.cumsum(np.full((8, 2), [2.0, 0.1 * i]), axis=0)
        rec = tasks.conversation_record(i, [f"images/{i}.png"],
                                        tasks.planning_prompt("straight", (4.0, 0.0),
                                                              (0.0, 0.0)),
                                        tasks.format_waypoints(future), "planning")
        rec["meta"] = {"ego_future": future.tolist()}
        records.append(rec)
    records.append(tasks.conversation_record("qa", ["images/0.png"], tasks.qa_prompt("Why?"),
                                             "Because.", "qa"))
    (root / "train.json").write_text(json.dumps(records))
    return root


def test_data_samples_read_planning_records_with_truth(tmp_path):
    samples = data_samples(write_data_set(tmp_path, 3), 2)
    assert len(samples) == 2
    assert samples[1].truth.shape == (8, 2) and samples[1].truth[0, 1] == pytest.approx(0.1)
    assert samples[0].images[0].size == (64, 36)


def test_bench_reports_four_decoders_on_the_same_prompts(tmp_path, capsys):
    data = write_data_set(tmp_path / "data")
    assert main(TINY + ["--data", str(data), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["decoders"]) == {"ar_optimised", "diffusion_reference", "diffusion_fast",
                                  "exact_fast"}
    assert r["fast_matches_reference"] is True
    for d in r["decoders"].values():
        assert d["tokens"] > 0 and d["tokens_per_s"] > 0
        assert d["ms_per_token"] == pytest.approx(d["decode_ms"] / d["tokens"])
        assert d["tokens_per_forward"] == pytest.approx(d["tokens"] / d["forwards"])
        assert d["l2"]["samples"] == 2              # quality measured on the data set
    ref, fast = r["decoders"]["diffusion_reference"], r["decoders"]["diffusion_fast"]
    assert (ref["tokens"], ref["blocks"]) == (fast["tokens"], fast["blocks"])
    # the fast decoder fuses each commit pass (one per block after a call's first) into the
    # next block's first step
    assert ref["blocks"] > ref["calls"]
    assert fast["forwards"] == ref["forwards"] - (ref["blocks"] - ref["calls"])
    assert r["ratios"]["fast_vs_reference"] == pytest.approx(
        fast["tokens_per_s"] / ref["tokens_per_s"])
    assert set(r["latency_ms"]["eager"]) >= {"ar_step", "block_step", "first_step",
                                          "commit"}
    assert r["trained"] is False and any("untrained" in n for n in r["notes"])


def test_repeats_report_each_pass_ratio_beside_the_pooled_one(tmp_path, capsys):
    """Passes decode the same tokens, so the pooled fast / AR ratio (total tokens over total
    time) is a mediant of the per-pass ratios and lies between the slowest and the fastest."""
    argv = TINY[:-1] + ["3", "--data", str(write_data_set(tmp_path / "data"))]
    assert main(argv + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    fast, ar = r["decoders"]["diffusion_fast"], r["decoders"]["ar_optimised"]
    spread = r["fast_vs_ar_per_pass"]
    assert r["repeats"] == 3 and len(spread["values"]) == 3
    assert spread["values"] == pytest.approx(
        [f / a for f, a in zip(fast["pass_tokens_per_s"], ar["pass_tokens_per_s"])])
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert spread["min"] * 0.999 <= r["ratios"]["fast_vs_ar"] <= spread["max"] * 1.001
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "each pass:" in x)
    assert line.count("x") == 1 and len(line.split(":")[1].split("(")[0].split()) == 3


def test_a_checkpoint_without_data_is_measured_on_fresh_simulator_frames(tmp_path, capsys,
                                                                         tiny_diffusion):
    tiny_diffusion.save_pretrained(tmp_path / "ckpt")
    assert main(["bench", "decode", "--checkpoint", str(tmp_path / "ckpt"), "--block-size",
                 "4", "--max-new-tokens", "8", "--samples", "2", "--no-constrained",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["trained"] is True and "simulator episodes" in r["data"]
    assert all(d["l2"]["samples"] == 2 for d in r["decoders"].values())


def test_bench_text_report_as_a_user_runs_it():
    r = subprocess.run(WAMDIFF2 + TINY + ["--samples", "1", "--batch", "1",
                                          "--tokens-per-forward", "4"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    for words in ("AR optimised", "diffusion reference", "diffusion fast", "tokens/s",
                  "per-forward latency", "projection (eager) at 4.00 tokens/forward"):
        assert words in r.stdout


@pytest.mark.parametrize("args, words", [
    (["--checkpoint", "/nonexistent/ckpt"], "does not exist"),
    (["--preset", "tiny", "--mode", "graphs"], "captures CUDA graphs and needs a CUDA device"),
    (["--preset", "tiny", "--attention", "flashinfer"], "flashinfer backend needs"),
    (["--preset", "tiny", "--batch", "0"], "must be >= 1"),
    (["--preset", "tiny", "--repeats", "0"], "--repeats"),
    (["--preset", "tiny", "--threads", "0"], "--threads must be >= 1, got 0"),
    (["--preset", "tiny", "--latency-modes", "eager,warp"], "unknown execution mode"),
])
def test_user_errors_are_one_sentence(args, words, capsys):
    assert main(["bench", "decode"] + args) == 2
    err = capsys.readouterr().err
    assert words in err and err.strip().count("\n") == 0


def test_bench_reports_constrained_and_unconstrained_side_by_side(tmp_path, capsys):
    """Without --constrained / --no-constrained: eight decoders on the same prompts, the
    constrained ones answering plans that all parse, fast == reference and exact == AR in
    both settings, and the constrained block step in the latency table."""
    data = write_data_set(tmp_path / "data")
    assert main(["bench", "decode", "--preset", "tiny", "--block-size", "32", "--steps", "4",
                 "--max-new-tokens", "96", "--samples", "2", "--threads", "1", "--data",
                 str(data), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["constraints"] == ["off", "on"]
    assert set(r["decoders"]) == {f"{n}{s}" for n in ("ar_optimised", "diffusion_reference",
                                                      "diffusion_fast", "exact_fast")
                                  for s in ("", "_constrained")}
    assert r["exact"]["off"]["matches_ar"] and r["exact"]["on"]["matches_ar"]
    for name, d in r["decoders"].items():
        if name.endswith("_constrained"):
            assert d["l2"]["parse_failures"] == 0 and d["l2"]["l2_avg"] is not None
    assert r["fast_matches_reference"] and r["constrained"]["fast_matches_reference"]
    assert set(r["constrained"]["ratios"]) >= {"fast_vs_ar", "fast_vs_reference"}
    eager = r["latency_ms"]["eager"]
    assert eager["block_step_constrained"] > 0 and eager["constraint_select"] > 0
    assert eager["last_step_constrained"] > 0 and eager["constraint_fill"] > 0
    assert main(["bench", "decode", "--preset", "tiny", "--max-new-tokens", "32"]) == 2
    assert "takes 80 tokens" in capsys.readouterr().err


def test_latency_only_prints_the_step_table_without_decoding(capsys):
    assert main(["bench", "decode", "--preset", "tiny", "--block-size", "4", "--threads", "1",
                 "--latency-only", "--latency-reps", "2"]) == 0
    out = capsys.readouterr().out
    assert "latency only" in out and "tokens/s" not in out.split("per-forward")[0]
    for row in ("block step (4)", "block step (4), constrained", "constrained selection alone"):
        assert row in out


def test_bench_reports_exact_mode_beside_the_ar_decoder(tmp_path, capsys):
    """Exact mode's answers are its verifier's: here the AR decoder compared (a preset's own
    weights read token by token), token for token; its acceptance, forwards, projections and
    verify latency are reported; --decode-mode exact runs it alone beside the AR decoder."""
    data = write_data_set(tmp_path / "data")
    argv = TINY + ["--data", str(data), "--decode-mode", "exact", "--draft-steps", "2"]
    assert main(argv + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["decoders"]) == {"ar_optimised", "exact_fast"} and "ratios" not in r
    ar, ex, c = r["decoders"]["ar_optimised"], r["decoders"]["exact_fast"], r["exact"]["off"]
    assert c["matches_ar"] is True and ex["tokens"] == ar["tokens"]
    assert c["accepted_per_block"] == pytest.approx(ex["tokens"] / ex["row_blocks"])
    assert c["forwards"]["verify"] == ex["verify_forwards"] > 0
    assert c["forwards"]["draft"] == ex["denoise_forwards"] <= 2 * ex["drafts"]
    assert c["gpu_projection"] == pytest.approx(ar["forwards"] / ex["forwards"])
    assert r["latency_ms"]["eager"]["exact_verify"] > 0
    assert c["projection_from_steps"]["eager"]["ratio"] > 0
    assert "draft steps: 2" in r["exact_settings"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for words in ("exact fast", "answers == AR optimised answers", "GPU projection",
                  "exact verify step (4)"):
        assert words in out
    assert main(TINY + ["--verifier", "/nonexistent/dir"]) == 2
    assert "does not exist" in capsys.readouterr().err
