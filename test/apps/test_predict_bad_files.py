"""`predict` and `eval open-loop` on hostile files: a FIFO as a record's image and a record of
megabytes fail alone while the rest are answered; a FIFO, a device or deep nesting where an
input, a predictions file or --data should be is one sentence, exit 2, never a hang."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from predict_inputs import write_reference_file
from refusals import without_loading_bar

from wamdiff2_core.apps.cli import main
from wamdiff2_core.evaluation.requests import MAX_RECORD_CHARS

ROOT = Path(__file__).resolve().parents[2]


def test_a_fifo_image_and_a_huge_question_fail_alone(tmp_path):
    path = write_reference_file(tmp_path, bad=())
    records = json.loads(path.read_text())[:4]
    os.mkfifo(tmp_path / "images" / "pipe.png")
    records[1] = {**records[1], "id": "fifo", "image": ["images/pipe.png"]}
    huge = "Question: " + "how far? " * (MAX_RECORD_CHARS // 9 + 1000) + "<image>"
    records.append({"id": "huge", "image": records[0]["image"], "conversations": [
        {"from": "human", "value": huge}, {"from": "gpt", "value": "far"}]})
    path.write_text(json.dumps(records))
    out = tmp_path / "p.json"
    proc = subprocess.run(
        [sys.executable, "-m", "wamdiff2_core.cli", "predict", "--input", str(path),
         "--output", str(out), "--image-root", str(tmp_path), "--batch-size", "2",
         "--no-progress", "--json"],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
        timeout=300, cwd=ROOT)                   # a FIFO opened blocking would hang here
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["records"] == 5 and summary["failed"] == 2 and summary["decoded"] == 3
    items = {item["id"]: item for item in json.loads(out.read_text())}
    assert "FIFO" in items["fifo"]["error"]
    assert "characters of text" in items["huge"]["error"]
    assert "before tokenization" in items["huge"]["error"]
    assert len(items["huge"]["question"]) == MAX_RECORD_CHARS
    assert all("error" not in items[r["id"]] for r in (records[0], records[2], records[3]))
    assert "2 of 5 records failed" in proc.stderr


def test_bad_input_files_are_one_sentence(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"id": 0, "prediction": "x"}]))
    cases = [(deep, "nests 200000 levels deep"), (fifo, "is a FIFO"),
             (zero, "is a character device")]
    for input_path, message in cases + [(tmp_path, "is a folder without train.json")]:
        rc = main(["predict", "--input", str(input_path), "--output", str(tmp_path / "o.json")])
        err = without_loading_bar(capsys.readouterr().err)         # joined lines, no final \n
        assert rc == 2 and message in err and err.count("\n") == 0, err
        rc = main(["eval", "open-loop", "--out", str(tmp_path / "r"), "--predictions",
                   str(good), "--data", str(input_path)])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and err.count("\n") == 1, err
    for input_path, message in cases + [(tmp_path, "is a directory")]:
        rc = main(["eval", "open-loop", "--out", str(tmp_path / "r"), "--predictions",
                   str(input_path)])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("image", [7, {"a": 1}])
def test_a_detection_item_whose_image_is_no_path_is_counted(tmp_path, capsys, image):
    truth = '[{"bbox_2d": [100, 100, 300, 300], "label": "car"}]'
    path = tmp_path / "p.json"
    path.write_text(json.dumps([
        {"id": "d", "datasource": "navsim", "image": image, "question": "", "prediction": truth,
         "ground_truth": truth},
        {"id": "p", "datasource": "navsim", "image": [], "question": "", "prediction": "",
         "ground_truth": "", "error": "CUDA out of memory"}], indent=4))
    rc = main(["eval", "open-loop", "--predictions", str(path), "--out", str(tmp_path / "r"),
               "--json"])
    out, err = capsys.readouterr()
    # counted, reported, and (no item left to score) the run says so and exits 1
    assert rc == 1 and "Traceback" not in err and "every record failed" in err, err
    report = json.loads(out)
    assert report["failures"] == {"planning": 0, "detection": 1, "qa": 0, "unknown": 1}
    assert "2 record(s) failed (detection 1, unknown 1); the first: record 'd'" in err
