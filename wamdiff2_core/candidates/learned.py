"""The learned scorer: a linear model over candidate features, fitted to privileged labels.

Training data are simulator frames (``wamdiff2 candidates collect``): each frame's K
candidates with their features (``features.FEATURES``, all run-time information) and the
privileged score of each (``sim.candidate_oracle``: the PDM score of following it). Only the
ranking inside a frame matters to a selection, so the fit is ridge regression on features
and labels centred per frame (what is common to a frame's candidates, e.g. how hard the
scene is, drops out). The weights are a small JSON file (names, centre, scale, weights):
readable, diffable, no pickle.

``greedy_bonus`` is added to the score of row 0, the greedy plan (the plan without
candidates): a candidate must beat it by that much to be chosen. Frame-by-frame labels
cannot set it (each frame's label assumes its plan is followed for 4 s, while the closed
loop replans every 0.5 s and pays for switching between samples), so it is chosen on
closed-loop runs of the tuning seeds and stated when fitting.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.candidates.features import FEATURES

FORMAT = "wamdiff2-candidate-scorer/1"


class ScorerWeightsError(ValueError):
    """A weights file that cannot be used; the message says why."""


@dataclass(frozen=True)
class LinearScorer:
    features: tuple[str, ...]
    centre: np.ndarray          # (F,) subtracted before scaling
    scale: np.ndarray           # (F,)
    weights: np.ndarray         # (F,)
    info: dict
    greedy_bonus: float = 0.0   # added to row 0's score

    def predict(self, features: np.ndarray) -> np.ndarray:
        """(K,) scores of feature rows (K, F) in ``FEATURES`` order; NaN rows (candidates
        that did not parse) score NaN."""
        if tuple(self.features) != FEATURES:
            raise ScorerWeightsError(f"the weights were fitted on features {self.features}, "
                                     f"this code computes {FEATURES}")
        greedy = features[:, FEATURES.index("greedy")]
        return ((features - self.centre) / self.scale) @ self.weights + \
            self.greedy_bonus * greedy

    def to_json(self) -> dict:
        return {"format": FORMAT, "features": list(self.features),
                "centre": self.centre.round(8).tolist(), "scale": self.scale.round(8).tolist(),
                "weights": self.weights.round(8).tolist(), "greedy_bonus": self.greedy_bonus,
                "info": self.info}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        write_atomic(path, (json.dumps(self.to_json(), indent=1) + "\n").encode())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LinearScorer":
        """Weights from a JSON file; ScorerWeightsError (one sentence naming the file and
        the field) when it cannot be read, is not one of ours, does not match this code's
        features or holds a field of the wrong type or range."""
        from wamdiff2_core.user_files import read_json

        try:
            data = read_json(path, "candidate scorer weights", WEIGHTS_MAX_BYTES)
        except ValueError as exc:
            raise ScorerWeightsError(str(exc)) from None
        where = f"candidate scorer weights {path}"
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ScorerWeightsError(f"{where} is not a candidate scorer weights file "
                                     f"(format {FORMAT})")
        names = data.get("features")
        if not isinstance(names, list) or tuple(names) != FEATURES:
            shown = names if isinstance(names, list) else repr(names)[:80]
            raise ScorerWeightsError(f"{where} was fitted on features {shown}, this code "
                                     f"computes {list(FEATURES)}")
        arrays = [_vector(data.get(k), k, where) for k in ("centre", "scale", "weights")]
        if (arrays[1] <= 0).any():
            raise ScorerWeightsError(f"{where}: every value of scale must be > 0")
        bonus = data.get("greedy_bonus", 0.0)
        if isinstance(bonus, bool) or not isinstance(bonus, (int, float)) or \
                not abs(bonus) < 1e6:
            raise ScorerWeightsError(f"{where}: greedy_bonus must be a finite number, got "
                                     f"{repr(bonus)[:80]}")
        info = data.get("info", {})
        if not isinstance(info, dict):
            raise ScorerWeightsError(f"{where}: info must be a mapping")
        return cls(FEATURES, *arrays, info, float(bonus))


WEIGHTS_MAX_BYTES = 1 << 20        # a weights file is about 2 KB


def _vector(value, key: str, where: str) -> np.ndarray:
    """``value`` as a (len(FEATURES),) float array; ScorerWeightsError naming ``key``
    unless it is a list of that many finite numbers."""
    n = len(FEATURES)
    if not isinstance(value, list) or len(value) != n or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not abs(v) < 1e12
            for v in value):
        raise ScorerWeightsError(f"{where}: {key} must be a list of {n} finite numbers, got "
                                 f"{repr(value)[:80]}")
    return np.asarray(value, dtype=np.float64)


def centred(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``values`` (N, ...) minus the mean of their group."""
    out = np.array(values, dtype=np.float64)
    for g in np.unique(groups):
        rows = groups == g
        out[rows] -= out[rows].mean(axis=0)
    return out


def fit(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, ridge: float = 1.0,
        info: dict | None = None, greedy_bonus: float = 0.0) -> LinearScorer:
    """Ridge regression of per-frame centred ``labels`` (N,) on per-frame centred,
    standardised ``features`` (N, F); ``groups`` (N,) names each row's frame. Rows with a
    NaN feature (unparsed candidates) are left out."""
    keep = np.isfinite(features).all(axis=1) & np.isfinite(labels)
    x, y, g = features[keep], labels[keep], groups[keep]
    if len(np.unique(g)) < 2:
        raise ValueError("fitting a candidate scorer needs candidates of at least two frames")
    centre = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    xs = centred((x - centre) / scale, g)
    ys = centred(y, g)
    weights = np.linalg.solve(xs.T @ xs + ridge * np.eye(x.shape[1]), xs.T @ ys)
    return LinearScorer(FEATURES, centre, scale, weights,
                        {"rows": int(len(y)), "frames": int(len(np.unique(g))),
                         "ridge": ridge, **(info or {})}, greedy_bonus)
