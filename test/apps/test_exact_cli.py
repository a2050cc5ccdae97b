"""`--decode-mode exact` from the command line: the bundled model's plan is its AR teacher's
plan, on both decoder backends; settings that cannot be honoured are one sentence."""
import json

import pytest
from PIL import Image

from bundle_answers import FIXTURE, RECORDS
from refusals import without_loading_bar
from wamdiff2_core.apps.cli import main
from wamdiff2_core.types import bundled_checkpoint_path


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    record = next(r for r in json.loads(RECORDS.read_text()) if r["task"] == "planning")
    path = tmp_path_factory.mktemp("img") / "cam.png"
    Image.open(FIXTURE / record["image"][0]).convert("RGB").save(path)
    return path


def plan(capsys, *args) -> dict:
    assert main(["plan", "--json", "--velocity", "9.5", "0", "--command", "left",
                 *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def waypoints(report: dict):
    return report.get("waypoints") or report["plan"]["waypoints"]


def test_plan_in_exact_mode_is_the_teachers_plan(image, capsys):
    teacher = plan(capsys, "--image", image, "--checkpoint",
                   f"{bundled_checkpoint_path()}/ar_teacher")
    for backend in ("fast", "reference"):
        exact = plan(capsys, "--image", image, "--decode-mode", "exact", "--backend", backend)
        assert waypoints(exact) == waypoints(teacher), backend


def test_exact_mode_refusals_are_one_sentence(image, capsys):
    """An AR checkpoint cannot draft: refused when the planner is built, as one sentence."""
    teacher = f"{bundled_checkpoint_path()}/ar_teacher"
    assert main(["plan", "--image", str(image), "--checkpoint", teacher,
                 "--decode-mode", "exact"]) == 2
    err = without_loading_bar(capsys.readouterr().err)
    assert "drafts with a diffusion model" in err and err.strip().count("\n") == 0
    with pytest.raises(SystemExit):
        main(["plan", "--image", str(image), "--decode-mode", "fastest"])
    assert "invalid choice: 'fastest'" in capsys.readouterr().err
