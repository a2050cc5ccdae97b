"""`wamdiff2 bench candidates` times the bundled model's plan per frame for each K and
compares each with K = 1; bad --ks are refused before anything loads."""
import json

import pytest

from wamdiff2_core.apps.cli import main


def test_bench_candidates_reports_every_k_against_one(capsys):
    assert main(["bench", "candidates", "--ks", "1,2", "--frames", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["k"] for r in report["rows"]] == [1, 2] and report["frames"] == 2
    assert report["rows"][0]["ratio_p50"] == 1.0 and report["rows"][1]["p50_ms"] > 0


@pytest.mark.parametrize("ks, words", [("2,4", "must include 1"), ("1,x", "not a comma"),
                                       ("1,17", "1..16")])
def test_bad_ks_are_refused(ks, words, capsys):
    assert main(["bench", "candidates", "--ks", ks]) == 2
    assert words in capsys.readouterr().err


def test_bad_threads_are_refused_before_anything_loads(capsys):
    assert main(["bench", "candidates", "--threads", "0"]) == 2
    assert "--threads must be >= 1, got 0" in capsys.readouterr().err
