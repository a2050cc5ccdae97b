"""scripts/shortcut_probe.py: the ridge probe recovers a linear target and not noise; on the
bundled model and a fresh racetrack episode the report counts every frame and reads the
expert's offsets off the records."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from wamdiff2_core.types import bundled_checkpoint_path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "shortcut_probe.py"


def _probe():
    spec = importlib.util.spec_from_file_location("shortcut_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ridge_probe_recovers_a_linear_target_and_not_noise():
    probe = _probe()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 50)) * rng.uniform(0.01, 10.0, size=50)   # scales differ
    w = rng.normal(size=50)
    y = ((x - x.mean(0)) / x.std(0)) @ w
    assert probe.ridge_r2(x[:200], y[:200], x[200:], y[200:], 1.0) > 0.95
    noise = rng.normal(size=300)
    assert probe.ridge_r2(x[:200], noise[:200], x[200:], noise[200:], 1.0) < 0.2


@pytest.mark.skipif(bundled_checkpoint_path() is None, reason="this checkout has no bundled model")
def test_shortcut_probe_reports_every_racetrack_frame(tmp_path, capsys):
    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, generate

    generate(tmp_path, GeneratorConfig(episodes=1, seed=4242, scenarios=("racetrack",),
                                       episode=EpisodeConfig(frames=4)), progress=False)
    records = [r for r in json.loads((tmp_path / "train.json").read_text())
               if r["task"] == "planning"]
    probe = _probe()
    assert probe.main([str(bundled_checkpoint_path()), str(tmp_path), "--scenario", "racetrack",
                       "--probe-train", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["frames"] + report["unparsed"] == len(records) == 4
    truth = [probe.lateral_at_4s(r) for r in records]
    assert report["expert_mean_abs"] == pytest.approx(np.abs(truth).mean())
    for name in ("as_recorded", "lateral_zeroed"):
        assert report[name]["mean_abs_error"] >= 0 and -1 <= report[name]["corr"] <= 1
    assert report["probe"]["train_frames"] == 4 and report["probe"]["features"] > 0
    assert all(r2 <= 1.0 for r2 in report["probe"]["r2"].values())
    with pytest.raises(SystemExit) as refused:      # no highway frames in this data set
        probe.main([str(bundled_checkpoint_path()), str(tmp_path), "--scenario", "highway"])
    assert refused.value.code == 2
