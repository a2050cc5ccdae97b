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
        """Weights from a JSON file; ScorerWeightsError naming the file when it is not one
        of ours or does not match this code's features."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ScorerWeightsError(f"cannot read candidate scorer weights {path}: "
                                     f"{exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ScorerWeightsError(f"{path} is not a candidate scorer weights file "
                                     f"(format {FORMAT})")
        names = tuple(data.get("features", ()))
        if names != FEATURES:
            raise ScorerWeightsError(f"{path} was fitted on features {list(names)}, this "
                                     f"code computes {list(FEATURES)}")
        arrays = [np.asarray(data.get(k), dtype=np.float64) for k in
                  ("centre", "scale", "weights")]
        bonus = data.get("greedy_bonus", 0.0)
        if any(a.shape != (len(FEATURES),) or not np.isfinite(a).all() for a in arrays) or \
                (arrays[1] <= 0).any() or not isinstance(bonus, (int, float)) or \
                not np.isfinite(bonus):
            raise ScorerWeightsError(f"{path} holds malformed or non-finite weights")
        return cls(names, *arrays, data.get("info", {}), float(bonus))


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
