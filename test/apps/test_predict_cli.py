"""`wamdiff2 predict` end to end with the bundled model on a hand-written reference-format file:
the reference's keys, batch 8 = batch 1, 2 processes = 1, a SIGKILL then --resume, bad
records and bad inputs."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from predict_inputs import free_port, write_reference_file, without_timing

from wamdiff2_core.apps.cli import main
from wamdiff2_core.evaluation.predictions import REFERENCE_KEYS

VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def predict(input_path, output, *extra, capsys=None) -> dict:
    """`predict` on a file written by ``write_reference_file`` (reference records, images
    beside the file: --image-root names that folder)."""
    rc = main(["predict", "--input", str(input_path), "--output", str(output),
               "--image-root", str(Path(input_path).parent), "--no-progress", "--json",
               *extra])
    assert rc == 0
    return json.loads(capsys.readouterr().out) if capsys else {}


def command(*args) -> list[str]:
    return [sys.executable, "-m", "wamdiff2_core.cli", "predict", *map(str, args)]


ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def one_by_one(tmp_path_factory):
    """The reference file (one bad record) and its batch-1 predictions."""
    folder = tmp_path_factory.mktemp("ref")
    path = write_reference_file(folder)
    out = folder / "batch1.json"
    assert main(["predict", "--input", str(path), "--output", str(out), "--image-root",
                 str(folder), "--no-progress"]) == 0
    return path, json.loads(out.read_text())


def test_reference_keys_in_input_order_and_the_bad_record_errs(one_by_one):
    path, items = one_by_one
    records = json.loads(path.read_text())
    assert [item["id"] for item in items] == [r["id"] for r in records]
    bad = items[5]
    assert bad["id"] == "bad_missing_image" and bad["prediction"] == ""
    assert "nope.png" in bad["error"] and "does not exist" in bad["error"]
    assert list(bad) == [*REFERENCE_KEYS, "error", "wamdiff2"]
    good = [item for item in items if item is not bad]
    assert all(list(item) == [*REFERENCE_KEYS, "wamdiff2"] for item in good)
    assert [item["datasource"] for item in items[:4]] == ["sim", "navsim", "navsim", "sim"]
    assert items[0]["question"] == records[0]["conversations"][0]["value"]
    assert items[0]["ground_truth"] == records[0]["conversations"][1]["value"]
    plans = [item for item in good if item["wamdiff2"]["task"] == "planning"]
    assert len(plans) == 6 and all(len(p["wamdiff2"]["parsed"]["waypoints"]) == 8
                                   for p in plans)
    assert all(item["wamdiff2"]["tokens"] > 0 and item["wamdiff2"]["forwards"] > 0
               for item in good)


def test_batch_8_answers_equal_batch_1(one_by_one, tmp_path, capsys):
    path, items = one_by_one
    out = tmp_path / "new" / "folder" / "batch8.json"              # folders are created
    summary = predict(path, out, "--batch-size", "8", capsys=capsys)
    batched = json.loads(out.read_text())
    assert without_timing(batched, batch_fields=True) == without_timing(items, True)
    assert max(item["wamdiff2"].get("batch_size", 0) for item in batched) == 8
    assert summary["records"] == 19 and summary["failed"] == 1 and summary["decoded"] == 18
    assert summary["tokens"] == sum(i["wamdiff2"].get("tokens", 0) for i in items)


def test_two_processes_merge_to_the_one_process_output(one_by_one, tmp_path, capsys):
    path, _ = one_by_one
    predict(path, tmp_path / "one.json", "--batch-size", "4", capsys=capsys)
    proc = subprocess.run(
        [str(VENV_BIN / "torchrun"), "--nproc-per-node", "2", "--master-port",
         str(free_port()), "-m", "wamdiff2_core.cli", "predict", "--input", str(path),
         "--image-root", str(path.parent), "--output", str(tmp_path / "two.json"),
         "--batch-size", "4", "--no-progress"],
        env=ENV, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wamdiff2 predict: 19 records") == 1          # rank 0 alone
    assert "on 2 process(es) x batch 4" in proc.stdout
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert without_timing(two) == without_timing(one)
    assert not (tmp_path / "two.json.parts").exists()


def test_sigkill_loses_at_most_the_batch_in_flight_and_resume_finishes(one_by_one, tmp_path,
                                                                       capsys):
    path, items = one_by_one
    out, parts = tmp_path / "p.json", tmp_path / "p.json.parts"
    proc = subprocess.Popen(command("--input", path, "--output", out, "--batch-size", 2,
                                    "--image-root", path.parent, "--no-progress"),
                            env=ENV, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(parts.glob("rank*.json")) and time.monotonic() < deadline:
            assert proc.poll() is None, "predict ended before it was killed"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not out.exists()
    done = [item for part in parts.glob("rank*.json") for item in json.loads(part.read_text())]
    assert 2 <= len(done) < 18 and len(done) % 2 == 0      # whole batches only
    summary = predict(path, out, "--batch-size", "2", "--resume", capsys=capsys)
    assert summary["resumed"] == len(done) and summary["decoded"] == 18 - len(done)
    assert without_timing(json.loads(out.read_text()), True) == without_timing(items, True)
    assert not parts.exists()


def test_every_kind_of_bad_record_gets_its_error_and_the_rest_go_on(tmp_path, capsys):
    path = write_reference_file(tmp_path, bad=("no_image", "empty_conversation",
                                               "corrupt_image"), at=1, jsonl=True)
    summary = predict(path, tmp_path / "p.json", "--batch-size", "4", "--max-new-tokens",
                      "16", "--no-constrained", capsys=capsys)
    items = json.loads((tmp_path / "p.json").read_text())
    errors = {item["id"]: item.get("error", "") for item in items}
    assert "no image" in errors["bad_no_image"]
    assert "conversations" in errors["bad_empty"]
    assert "truncated or corrupt" in errors["bad_corrupt"]
    plans = [i for i in items if i["wamdiff2"].get("task") == "planning"]
    assert plans and all("did not end within 16 tokens" in i["error"] for i in plans)
    assert all(i["prediction"] == "" and i["wamdiff2"]["raw_text"] for i in plans)
    qa = [i for i in items if i["wamdiff2"].get("task") == "qa"]
    assert any("error" not in i for i in qa)
    assert summary["records"] == 21 and summary["failed"] == sum(map(bool, errors.values()))


def test_bad_inputs_are_one_sentence_and_write_nothing(tmp_path, capsys):
    good = write_reference_file(tmp_path / "in")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": 1,')
    (tmp_path / "file").write_text("")
    cases = [
        (broken, tmp_path / "o.json", "is not valid JSON"),
        (good, tmp_path / "file" / "o.json", "is a file, not a folder"),
        (good, tmp_path, "is a folder, not a file"),
    ]
    for input_path, output, message in cases:
        rc = main(["predict", "--input", str(input_path), "--output", str(output),
                   "--image-root", str(tmp_path / "in")])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "file", "in"]


def test_an_unfinished_run_is_not_overwritten_or_mixed(tmp_path, capsys):
    path = write_reference_file(tmp_path / "in")
    out = tmp_path / "p.json"
    parts = tmp_path / "p.json.parts"
    parts.mkdir()
    rc = main(["predict", "--input", str(path), "--output", str(out), "--no-progress",
               "--image-root", str(path.parent)])
    assert rc == 2 and "pass --resume" in capsys.readouterr().err
    assert list(parts.iterdir()) == [] and not out.exists()
    parts.rmdir()
    (tmp_path / "in" / "eval.json").write_text(json.dumps(json.loads(path.read_text())[:3]))
    parts.mkdir()
    (parts / "manifest.json").write_text(json.dumps({"input": "0" * 64}))
    rc = main(["predict", "--input", str(path), "--output", str(out), "--resume",
               "--image-root", str(path.parent), "--no-progress"])
    assert rc == 2 and "made with another" in capsys.readouterr().err
    assert not out.exists()


def test_resume_keeps_what_an_earlier_output_holds(one_by_one, tmp_path, capsys):
    path, items = one_by_one
    out = tmp_path / "p.jsonl"                                  # JSONL: one object a line
    out.write_text("".join(json.dumps(item) + "\n" for item in items[:10]))
    summary = predict(path, out, "--resume", "--batch-size", "4", capsys=capsys)
    assert summary["resumed"] == 9 and summary["decoded"] == 9    # 10 kept, one an error
    merged = [json.loads(line) for line in out.read_text().splitlines()]
    assert merged[:10] == items[:10]                              # kept as they were
    assert without_timing(merged, True) == without_timing(items, True)
