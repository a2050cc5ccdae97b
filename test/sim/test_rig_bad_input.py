"""Hostile and careless camera rigs given to `wamdiff2 data generate --cameras` (issue 54):
each is one sentence naming the file and the field, exit 2, no traceback, within bounded
time and memory, and nothing is generated."""
from __future__ import annotations

import pytest
from hostile_files import KINDS, hostile
from refusals import assert_one_sentence, run_measured

from wamdiff2_core.sim.camera import MAX_PIXELS, CameraConfig, load_rig

BOMB = "".join(f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9) + "]\n"
               for i in range(1, 10))

RIGS = {
    "fx zero": ("cameras:\n- {name: front, fx: 0}\n", "fx must be a finite number"),
    "mount_z NaN": ("cameras:\n- {name: front, mount_z: .nan}\n", "mount_z"),
    "fractional width": ("cameras:\n- {name: front, width: 320.5}\n",
                         "width must be an integer"),
    "30000-pixel camera": ("cameras:\n- {name: front, width: 30000, height: 30000}\n",
                           "width must be an integer in [16, 4096]"),
    "too many pixels": ("cameras:\n- {name: front, width: 4096, height: 4096}\n",
                        f"limit of {MAX_PIXELS} pixels"),
    "near 0 far -5": ("cameras:\n- {name: front, near: 0, far: -5}\n", "near must be"),
    "near beyond far": ("cameras:\n- {name: front, near: 10, far: 5}\n",
                        "near (10) must be less than far (5)"),
    "string focal": ("cameras:\n- {name: front, fx: abc}\n", "got 'abc'"),
    "50 cameras": ("cameras:\n" + "".join(f"- {{name: c{i}}}\n" for i in range(50)),
                   "has 50 cameras; at most 16"),
    "slash in a name": ("cameras:\n- {name: a/b}\n", "lower-case identifier"),
    "long name": ("cameras:\n- {name: " + "a" * 300 + "}\n", "lower-case identifier"),
    "duplicate": ("cameras:\n- {name: front}\n- {name: front}\n", "twice"),
    "deep nesting": ("[" * 200000, "more than 64 levels"),
    "alias bomb": ("a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB, "alias *a"),
}


def generate_argv(rig: str, out) -> list[str]:
    return ["data", "generate", "--out", str(out), "--episodes", "1", "--frames", "2",
            "--cameras", rig, "--no-progress"]


@pytest.mark.parametrize("kind", list(RIGS))
def test_bad_rig_file_is_one_sentence(tmp_path, kind):
    text, phrase = RIGS[kind]
    rig = tmp_path / "rig.yaml"
    rig.write_text(text)
    got = run_measured(generate_argv(str(rig), tmp_path / "out"), timeout=120)
    assert_one_sentence(got.rc, got.stderr, str(rig), phrase)
    assert got.peak_mb < 1500
    assert not (tmp_path / "out" / "train.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "dev zero", "directory", "json deep", "json 1e400"])
def test_unreadable_rig_files_are_refused_unread(tmp_path, kind):
    rig = tmp_path / ("rig.json" if kind.startswith("json") else "rig.yaml")
    if kind in KINDS:
        hostile(rig, kind)
    elif kind == "json deep":
        rig.write_text('{"cameras": ' + "[" * 100000)
    else:
        rig.write_text('{"cameras": [{"name": "front", "mount_z": 1e400}]}')
    phrase = {"fifo": "FIFO", "dev zero": "character device", "directory": "directory",
              "json deep": "levels deep", "json 1e400": "overflows a float"}[kind]
    got = run_measured(generate_argv(str(rig), tmp_path / "out"), timeout=60)
    assert_one_sentence(got.rc, got.stderr, phrase)
    assert got.seconds < 30 and got.peak_mb < 1500


def test_fifty_standard_names_are_one_sentence(tmp_path):
    got = run_measured(generate_argv(",".join(["front"] * 50), tmp_path / "out"), timeout=60)
    assert_one_sentence(got.rc, got.stderr, "--cameras names 50 cameras; at most 16")
    got = run_measured(generate_argv("x" * 5000, tmp_path / "out"), timeout=60)
    assert_one_sentence(got.rc, got.stderr, "not among the standard cameras")


def test_limits_admit_the_cameras_the_project_uses():
    for config in (CameraConfig(), CameraConfig(width=3840, height=2160),
                   CameraConfig(fx=200.0, fy=200.0, cx=0.0, cy=180.0, near=0.1, far=9000.0,
                                pitch_deg=-90.0, mount_z=0.0)):
        assert load_rig("front", config).first.width == config.width
