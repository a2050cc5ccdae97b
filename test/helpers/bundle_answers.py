"""The bundled model's answers on a fixed set of frames, recorded so that a change in loading,
preprocessing or decoding that changes what the bundle answers is caught.

The frames are committed (``test/fixtures/bundle_answers/``: six simulator frames of two
episodes of ``wamdiff2 data generate --seed 4242``, a seed no training run used, and their 18
records). The answers are recorded by a command, so a new bundle (or a deliberate change of
the arithmetic) is re-recorded in one step:

    .venv/bin/python test/helpers/bundle_answers.py --record

``--frames`` regenerates the frames and records themselves (only needed when the data
generator's format changes). The recorded answers hold for the torch and transformers
versions in setup.py on an x86-64 CPU; greedy answers of a float model may differ on other
hardware, which is a reason to re-record there, not to loosen the test.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "bundle_answers"
RECORDS = FIXTURE / "records.json"
ANSWERS = FIXTURE / "answers.json"
SEED, EPISODES, FRAMES = 4242, 2, 3

# (name, backend, DecodeConfig keywords): the default decoding on both backends (the
# checkpoint's recommended commit rule, as every planner of it decodes by default), the
# library's default rule, and the fast planning rules (docs/decoding.md), which exercise other
# commit branches. Keywords name a rule, so the checkpoint's recommendation does not apply.
SETTINGS = (
    ("reference", "reference", None),
    ("fast", "fast", None),
    ("fast_dynamic", "fast", {"commit_rule": "low_confidence_dynamic"}),
    ("fast_leftmost8", "fast", {"commit_rule": "low_confidence_leftmost", "steps_per_block": 8,
                                "threshold": 0.95}),
    ("fast_frontier", "fast", {"commit_rule": "low_confidence_frontier", "threshold": 0.95}),
)


def make_frames() -> None:
    """Regenerate the committed frames and records (deterministic simulator episodes)."""
    import tempfile

    from wamdiff2_core.sim.episode import EpisodeConfig
    from wamdiff2_core.sim.generator import GeneratorConfig, generate

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sim"
        generate(out, GeneratorConfig(episodes=EPISODES, seed=SEED,
                                      episode=EpisodeConfig(frames=FRAMES)), progress=False)
        if FIXTURE.exists():
            shutil.rmtree(FIXTURE / "images", ignore_errors=True)
        FIXTURE.mkdir(parents=True, exist_ok=True)
        shutil.copytree(out / "images", FIXTURE / "images")
        records = json.loads((out / "train.json").read_text())
        RECORDS.write_text(json.dumps(records, indent=1) + "\n")


def compute_answers(planner=None) -> dict[str, list[str]]:
    """Setting name -> the raw answer texts of every fixture record, in order."""
    from dataclasses import replace

    from PIL import Image

    from wamdiff2_core.decoding.config import DecodeConfig
    from wamdiff2_core.planner import Planner
    from wamdiff2_core.tasks import record_prompt_and_answer

    planner = planner or Planner.from_pretrained()
    records = json.loads(RECORDS.read_text())
    prompts = [record_prompt_and_answer(r)[0] for r in records]
    images = [[Image.open(FIXTURE / p).convert("RGB") for p in r["image"]] for r in records]
    out = {}
    for name, backend, knobs in SETTINGS:
        p = planner.reconfigure(replace(planner.config, decode=DecodeConfig(**(knobs or {})),
                                        backend=backend))
        out[name] = [p.generate([text], [imgs])[0][0] for text, imgs in zip(prompts, images)]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help=f"write {ANSWERS}")
    parser.add_argument("--frames", action="store_true",
                        help="regenerate the frames and records first")
    args = parser.parse_args(argv)
    if args.frames:
        make_frames()
    answers = compute_answers()
    if args.record:
        ANSWERS.write_text(json.dumps(answers, indent=1) + "\n")
        print(f"wrote {ANSWERS}")
    else:
        print(json.dumps(answers, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
