"""Frames files of `candidates collect`: read back, cross-validated by episode, refused
with the reason when they are not ours."""
import json

import numpy as np
import pytest

from wamdiff2_core.candidates.dataset import (FramesError, cross_validate, fit_frames,
                                              frames_header, read_frames)
from wamdiff2_core.candidates.features import FEATURES


def write_frames(path, episodes=4, frames=10, k=4, seed=0):
    rng = np.random.default_rng(seed)
    lines = [json.dumps(frames_header(seed=seed))]
    for e in range(episodes):
        for _ in range(frames):
            x = rng.normal(size=(k, len(FEATURES)))
            score = 1 / (1 + np.exp(-(x[:, 1] - x[:, 4])))       # a learnable ranking
            features = x.tolist()
            oracle = [{"score": float(s)} for s in score]
            features[k - 1] = [None] * len(FEATURES)             # one answer did not parse
            oracle[k - 1] = None
            lines.append(json.dumps({"episode": e, "features": features, "oracle": oracle}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_frames_round_trip_and_cross_validate(tmp_path):
    frames = read_frames([write_frames(tmp_path / "f.jsonl")])
    assert len(frames) == 40 and frames[0].scores[-1] == 0.0
    assert np.isnan(frames[0].features[-1]).all()
    judged = cross_validate(frames, ridge=1.0, folds=2)
    assert judged["episodes"] == 4 and judged["greedy"] < judged["learned"] <= judged["best"]
    assert fit_frames(frames).info["frames"] == 40


def test_bad_frames_files_are_refused(tmp_path):
    (tmp_path / "x.jsonl").write_text("{}\n")
    with pytest.raises(FramesError, match="not a candidate frames file"):
        read_frames([tmp_path / "x.jsonl"])
    header = frames_header()
    (tmp_path / "old.jsonl").write_text(json.dumps({**header, "features": ["a"]}) + "\n")
    with pytest.raises(FramesError, match="collect it again"):
        read_frames([tmp_path / "old.jsonl"])
    (tmp_path / "bad.jsonl").write_text(json.dumps(header) + "\n{\"episode\": 0}\n")
    with pytest.raises(FramesError, match=r"bad.jsonl:2: malformed frame"):
        read_frames([tmp_path / "bad.jsonl"])
    with pytest.raises(FramesError, match="missing.jsonl does not exist"):
        read_frames([tmp_path / "missing.jsonl"])
    (tmp_path / "deep.jsonl").write_text(json.dumps(header) + "\n" + "[" * 200000 + "\n")
    with pytest.raises(FramesError, match="line 2 nests 200000 levels deep"):
        read_frames([tmp_path / "deep.jsonl"])
    with pytest.raises(ValueError, match="at least 3 episodes"):
        cross_validate(read_frames([write_frames(tmp_path / "f.jsonl", episodes=2)]))
