"""`wamdiff2 bench predict` at tiny scale (a check that it runs and reports, not a timing)."""
import json

import pytest
from predict_inputs import write_reference_file

from wamdiff2_core.apps.bench.predict import parse_configs
from wamdiff2_core.apps.cli import main
from wamdiff2_core.apps.common import CliError


def test_configs_parse_and_bad_ones_are_one_sentence():
    assert parse_configs("1x1, 2X8") == [(1, 1), (2, 8)]
    for bad in ("2", "0x4", "1xa"):
        with pytest.raises(CliError, match="--configs"):
            parse_configs(bad)


def test_bench_predict_reports_each_configuration_and_equal_answers(tmp_path, capsys,
                                                                    monkeypatch):
    path = write_reference_file(tmp_path, bad=())
    monkeypatch.chdir(tmp_path)           # reference records: images under the working dir
    rc = main(["bench", "predict", "--data", str(path), "--records", "5", "--configs",
               "1x1,1x4", "--threads", "1", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "cpu" and report["source"] == "bundled model"
    assert [(c["processes"], c["batch_size"]) for c in report["configs"]] == [(1, 1), (1, 4)]
    for config in report["configs"]:
        assert config["records"] == 5 and config["failed"] == 0
        assert config["samples_per_s"] > 0 and config["tokens_per_s"] > 0
        assert config["answers_differing_from_first"] == 0


def test_first_records_must_be_within_the_records(capsys):
    rc = main(["bench", "predict", "--gpu", "--preset", "tiny", "--device", "cpu",
               "--records", "4", "--first-records", "5"])
    assert rc == 2 and "--first-records must be in 1..4" in capsys.readouterr().err


def test_several_process_runs_get_the_decoding_options():
    from pathlib import Path

    from wamdiff2_core.apps.bench.predict import _command
    from wamdiff2_core.apps.cli import build_parser

    args = build_parser().parse_args(["bench", "predict", "--preset", "tiny", "--block-size",
                                      "4", "--max-new-tokens", "8", "--no-constrained"])
    cmd = _command(args, 2, 4, Path("in.json"), Path("out.json"))
    assert cmd[cmd.index("--block-size") + 1] == "4" and "--no-constrained" in cmd
    assert cmd[cmd.index("--max-new-tokens") + 1] == "8" and "--constrained" not in cmd
    args.constrained = True
    assert "--constrained" in _command(args, 2, 4, Path("in.json"), Path("out.json"))
