"""`bag eval` of the bundled sample bag with the bundled model: output bag and report with
metrics (its own file: 18 decodes take a while on the 2-core CPU)."""
from __future__ import annotations

import json
from pathlib import Path

from wamdiff2_core.apps.cli import main
from wamdiff2_core.planner import bundled_checkpoint_path
from wamdiff2_ros.tools.bag_io import BagReader
from wamdiff2_ros.tools.bag_layout import OutputTopics
from wamdiff2_ros.tools.demo import SAMPLE_BAG

OUT = OutputTopics()
# The bundled model where this checkout has one; else the untrained preset, kept fast.
MODEL = [] if bundled_checkpoint_path() else ["--checkpoint", "tiny", "--max-new-tokens", "32",
                                              "--steps-per-block", "4"]


def _eval(argv: list[str], capsys) -> tuple[int, str]:
    import torch

    threads = torch.get_num_threads()          # --threads sets it for the whole process
    try:
        code = main(["bag", "eval", *argv, "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    return code, capsys.readouterr().out


def test_eval_of_the_bundled_bag_writes_output_bag_and_report_with_metrics(tmp_path, capsys):
    out, report_path = tmp_path / "eval.mcap", tmp_path / "report.json"
    code, printed = _eval([str(SAMPLE_BAG), *MODEL, "--tasks", "planning", "--threads", "1",
                           "--out", str(out), "--report", str(report_path)], capsys)
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["frames"] == report["frames_with_ground_truth"] == 18
    planning = report["open_loop"]["planning"]
    assert planning["num_records"] == 18
    assert planning["num_parsed"] + planning["num_parse_failures"] == 18
    assert report["planning"]["parse_failures"] == planning["num_parse_failures"]
    assert report["planning"]["latency_ms"]["count"] == 18
    if bundled_checkpoint_path() is not None:
        assert planning["num_parsed"] >= 1, report["per_frame"][0]["planning"]["text"]
    if planning["num_parsed"]:
        assert planning["l2_avg_3s"] is not None and planning["collision_rate"] is not None
    else:
        assert planning["l2_avg_3s"] is None          # undefined, never a made-up 0
    assert report["detection"] is None                # not asked for
    with BagReader(out) as bag:
        topics = {t: info.count for t, info in bag.topics.items()}
    assert topics[OUT.markers] == topics[OUT.stats] == 18
    assert topics.get(OUT.path, 0) == planning["num_parsed"]
    frames = sorted(p.name for p in Path(report["frames_dir"]).iterdir())
    assert frames == [f"frame_{i:04d}.png" for i in range(18)]
    assert "18 frames" in printed
