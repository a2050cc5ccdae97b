"""`--decode-mode exact` from the command line: the bundled model's plans and predictions are
its AR teacher's (or, with `--verifier self`, its own token-by-token ones), on both decoder
backends; the Planner keeps its verifier and exact settings across reconfigure; settings
that cannot be honoured are one sentence."""
import json
from dataclasses import replace

import pytest
from PIL import Image

from bundle_answers import FIXTURE, RECORDS
from predict_inputs import write_reference_file
from refusals import without_loading_bar
from wamdiff2_core.apps.cli import main
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig
from wamdiff2_core.planner import Planner, PlannerConfig
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


def test_plan_with_the_self_verifier_is_the_models_own_token_by_token_plan(image, capsys):
    own = plan(capsys, "--image", image, "--paradigm", "ar", "--block-size", "1")
    exact = plan(capsys, "--image", image, "--decode-mode", "exact", "--verifier", "self",
                 "--draft-steps", "2")
    assert waypoints(exact) == waypoints(own)
    assert main(["plan", "--image", str(image), "--decode-mode", "exact",
                 "--draft-steps", "0"]) == 2
    assert "draft_steps must be an integer >= 1" in capsys.readouterr().err


def test_predict_in_exact_mode_writes_the_teachers_predictions(tmp_path):
    path = write_reference_file(tmp_path / "ref", bad=())
    outs = {}
    for name, extra in (("teacher", ["--checkpoint", f"{bundled_checkpoint_path()}/ar_teacher"]),
                        ("exact", ["--decode-mode", "exact"])):
        outs[name] = tmp_path / f"{name}.json"
        assert main(["predict", "--input", str(path), "--output", str(outs[name]),
                     "--image-root", str(path.parent), "--no-progress", *extra]) == 0
    teacher, exact = (json.loads(outs[n].read_text()) for n in ("teacher", "exact"))
    assert [p["prediction"] for p in exact] == [p["prediction"] for p in teacher]
    assert len(exact) == 18 and not any(p.get("error") for p in exact)


def test_the_planner_keeps_its_verifier_and_exact_settings():
    planner = Planner.from_pretrained(config=PlannerConfig(
        DecodeConfig(mode="exact"), verifier="self", exact=ExactConfig(draft_steps=2)))
    assert planner.engine.exact == ExactConfig(draft_steps=2)
    assert planner.engine.exact_verifier().fields.paradigm == "ar"
    assert planner.reconfigure(replace(planner.config, decode=DecodeConfig())).engine \
        is planner.engine
    other = planner.reconfigure(replace(planner.config, exact=ExactConfig(draft_steps=1)))
    assert other.engine is not planner.engine and other.engine.verifier_spec == "self"
    assert planner.reconfigure(replace(planner.config, verifier=None)).engine.verifier_spec \
        is None
