"""Training frames for the learned scorer: reading them, fitting, and judging a fit.

A frames file is JSON Lines (``wamdiff2 candidates collect``): a header line
``{"format": FRAMES_FORMAT, "features": [...], ...}`` (the run's settings), then one line per
planned frame with every candidate's run-time ``features`` (``features.FEATURES``) and
privileged ``oracle`` outcome (``score`` in [0, 1], null for an answer that did not parse),
tagged with its ``episode``. Folds for cross-validation are whole episodes, so a fit is
judged on episodes it never saw.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from wamdiff2_core.candidates.features import FEATURES
from wamdiff2_core.candidates.learned import LinearScorer, fit

FRAMES_FORMAT = "wamdiff2-candidate-frames/1"


class FramesError(ValueError):
    """A frames file that cannot be used; the message names it and says why."""


@dataclass(frozen=True)
class Frame:
    episode: str                 # file and episode index: the cross-validation unit
    features: np.ndarray         # (K, F); NaN rows for candidates that did not parse
    scores: np.ndarray           # (K,) privileged scores; 0 for those


def frames_header(**settings) -> dict:
    """The header line of a frames file holding ``settings`` (JSON values)."""
    return {"format": FRAMES_FORMAT, "features": list(FEATURES), **settings}


def read_frames(paths: Sequence[str | Path]) -> list[Frame]:
    """Every labelled frame of the files, in order. FramesError for a file that is not a
    frames file of these features, or a malformed line (naming file and line)."""
    from wamdiff2_core.user_files import read_json_lines

    frames = []
    for path in paths:
        try:
            lines = read_json_lines(path, "candidate frames file")
        except ValueError as exc:
            raise FramesError(str(exc)) from None
        header = lines[0] if lines and isinstance(lines[0], dict) else {}
        if header.get("format") != FRAMES_FORMAT:
            raise FramesError(f"{path} is not a candidate frames file (format "
                              f"{FRAMES_FORMAT}; `wamdiff2 candidates collect` writes them)")
        if not isinstance(header.get("features"), list) or \
                tuple(header["features"]) != FEATURES:
            raise FramesError(f"{path} holds features {str(header.get('features'))[:200]}, "
                              f"this code computes {list(FEATURES)}: collect it again")
        for number, record in enumerate(lines[1:], start=2):
            try:
                features = np.array([[np.nan if v is None else v for v in row]
                                     for row in record["features"]], dtype=np.float64)
                scores = np.array([o["score"] if o else 0.0 for o in record["oracle"]],
                                  dtype=np.float64)
                episode = f"{path}#{record['episode']}"
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise FramesError(f"{path}:{number}: malformed frame "
                                  f"({str(exc)[:200]})") from None
            if features.shape != (len(scores), len(FEATURES)):
                raise FramesError(f"{path}:{number}: {len(scores)} candidates but features "
                                  f"of shape {features.shape}")
            frames.append(Frame(episode, features, scores))
    return frames


def fit_frames(frames: Sequence[Frame], ridge: float = 10.0, info: dict | None = None,
               greedy_bonus: float = 0.0) -> LinearScorer:
    """A linear scorer fitted on ``frames`` (``learned.fit``; a frame is a group)."""
    features = np.vstack([f.features for f in frames])
    scores = np.concatenate([f.scores for f in frames])
    groups = np.concatenate([np.full(len(f.scores), i) for i, f in enumerate(frames)])
    return fit(features, scores, groups, ridge, info, greedy_bonus)


def chosen(frame: Frame, scores: np.ndarray) -> tuple[float, int]:
    """The privileged score of the candidate ``scores`` (K,) would choose, and its row."""
    scores = np.where(np.isfinite(scores) & np.isfinite(frame.features).all(axis=1),
                      scores, -np.inf)
    index = int(np.argmax(scores))
    return float(frame.scores[index]), index


def cross_validate(frames: Sequence[Frame], ridge: float = 10.0, folds: int = 3,
                   greedy_bonus: float = 0.0) -> dict[str, float]:
    """Mean privileged score per frame of the greedy candidate (row 0), the best one, and
    the learned choice fitted on the other folds of episodes (``folds`` folds by episode,
    round robin), and how often that choice is not row 0."""
    episodes = list(dict.fromkeys(f.episode for f in frames))
    if len(episodes) < folds:
        raise ValueError(f"cross-validation over {folds} folds needs at least {folds} "
                         f"episodes, got {len(episodes)}")
    fold_of = {e: i % folds for i, e in enumerate(episodes)}
    learned, moved = [], []
    for fold in range(folds):
        model = fit_frames([f for f in frames if fold_of[f.episode] != fold], ridge,
                           greedy_bonus=greedy_bonus)
        for f in (f for f in frames if fold_of[f.episode] == fold):
            score, index = chosen(f, model.predict(f.features))
            learned.append(score)
            moved.append(index != 0)
    return {"frames": len(frames), "episodes": len(episodes),
            "greedy": _mean(frames, lambda f: float(f.scores[0])),
            "best": _mean(frames, lambda f: float(f.scores.max())),
            "learned": round(float(np.mean(learned)), 4),
            "not_greedy": round(float(np.mean(moved)), 4)}


def _mean(frames: Sequence[Frame], value: Callable[[Frame], float]) -> float:
    return round(float(np.mean([value(f) for f in frames])), 4)
