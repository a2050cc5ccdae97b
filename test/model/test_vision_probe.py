"""scripts/vision_probe.py on the bundled model and a fresh simulator episode: one row per
stage of the vision tower, with finite ratios, and the black frame further from the camera
frames than they are from each other."""
import importlib.util
import json
from pathlib import Path

import pytest

from wamdiff2_core.types import bundled_checkpoint_path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vision_probe.py"
pytestmark = pytest.mark.skipif(bundled_checkpoint_path() is None,
                                reason="this checkout has no bundled model")


def test_vision_probe_prints_every_stage(tmp_path, capsys, monkeypatch):
    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, generate

    generate(tmp_path, GeneratorConfig(episodes=1, seed=4242, episode=EpisodeConfig(frames=3)),
             progress=False)
    assert sum(bool(r["meta"].get("boxes")) for r in json.loads(
        (tmp_path / "train.json").read_text()) if r["task"] == "detection") >= 2
    monkeypatch.syspath_prepend(str(SCRIPT.parent))      # as `python scripts/...` has it
    spec = importlib.util.spec_from_file_location("vision_probe", SCRIPT)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.main([str(bundled_checkpoint_path()), str(tmp_path), "--frames", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line[:12].strip(): line[12:].split() for line in lines[2:]}
    assert list(rows) == ["patch_embed", "block 0", "block 1", "merger"]
    for tokens, between, within, vs_black in rows.values():
        assert int(tokens) > 0
        assert 0 <= float(between) < float(vs_black)
        assert float(within) > 0
