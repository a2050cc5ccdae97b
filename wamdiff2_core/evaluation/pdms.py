"""Closed-loop score, NAVSIM-PDMS style: ``NC x DAC x (5 EP + 5 TTC + 2 C) / 12``.

NAVSIM scores a 4-second plan; a closed-loop episode lasts longer, so it is cut into
consecutive ``window_s`` (4 s) windows, each window is scored with the terms below, and
the episode score is the mean over its nominal windows (those the episode should have
lasted). The run's score is the mean over episodes.

Terms of one window (all in [0, 1]):

- NC, no at-fault collision: 0 from the window in which the ego collides with a vehicle
  to the end of the episode: the episode stops at the collision and its remaining windows
  score 0. As in NAVSIM a collision is not the ego's fault when the ego was standing
  still or was hit from behind; then NC stays 1 and the remaining windows are not
  scored at all.
- DAC, drivable-area compliance: 0 if any corner of the ego's footprint left the road
  (every lane's surface, plus ``tolerance`` 0.3 m) at any step of the window.
- EP, ego progress: the ego's progress along the expert's path during the window divided
  by the expert's own progress during the same window of its run from the same start
  (``expert_progress``), clipped to [0, 1]; 1 when the expert moved less than
  ``min_expert_progress_m`` (it was waiting; nothing to compare).
- TTC, time to collision: 0 if at some step of the window, with both the ego and another
  vehicle ahead of it (its centre within ``ahead_angle_deg`` = 30 degrees of the ego's
  heading, nuPlan's "agent ahead" rule) moving on at constant velocity and heading, their
  footprints would meet within ``ttc_horizon_s`` (1 s) without touching now; steps where
  the ego is (nearly) standing still are ignored.
- C, comfort: 1 if longitudinal acceleration, lateral acceleration, longitudinal and total
  jerk, yaw rate and yaw acceleration of the driven trajectory stay within NAVSIM's
  bounds (``ComfortBounds``) at every step of the window. Derivatives come from
  Savitzky-Golay fits (1.5 s window), as NAVSIM/nuPlan smooth theirs.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from wamdiff2_core.geometry import box_corners, boxes_overlap, map_to_ego
# NAVSIM's comfort limits: defined with the other motion bounds (the candidate features read
# them too, from a layer below this one); ``pdms.ComfortBounds`` stays importable.
from wamdiff2_core.tasks.motion import ComfortBounds

WEIGHTS = {"ep": 5.0, "ttc": 5.0, "comfort": 2.0}


@dataclass(frozen=True)
class ScoreConfig:
    window_s: float = 4.0
    ttc_horizon_s: float = 1.0
    ttc_step_s: float = 0.1
    ahead_angle_deg: float = 30.0
    stationary_speed: float = 0.5
    min_expert_progress_m: float = 2.0
    savgol_window_s: float = 1.5
    comfort: ComfortBounds = field(default_factory=ComfortBounds)


@dataclass
class EpisodeLog:
    """What the runner recorded, one entry per control step (index 0 = start)."""

    dt: float
    nominal_steps: int                     # steps the episode was meant to last
    ego: np.ndarray                        # (T, 4) x, y, yaw, speed (map frame)
    ego_size: tuple[float, float]          # length, width
    others: list[np.ndarray]               # T x (N_t, 6) x, y, yaw, speed, length, width
    on_drivable: np.ndarray                # (T,) bool
    progress: np.ndarray                   # (T,) ego progress along the expert path [m]
    expert_progress: np.ndarray            # (T_ref,) expert distance travelled [m]
    collision_step: int | None = None
    collision_at_fault: bool = False


@dataclass(frozen=True)
class WindowScore:
    start_s: float
    nc: float
    dac: float
    ep: float
    ttc: float
    comfort: float
    score: float


@dataclass(frozen=True)
class EpisodeScore:
    score: float
    windows: tuple[WindowScore, ...]

    def terms(self) -> dict[str, float]:
        """Mean of each term over the scored windows."""
        if not self.windows:
            return {k: 0.0 for k in ("nc", "dac", "ep", "ttc", "comfort")}
        return {k: float(np.mean([getattr(w, k) for w in self.windows]))
                for k in ("nc", "dac", "ep", "ttc", "comfort")}

    def to_json(self) -> dict:
        return {"score": self.score, "terms": self.terms(),
                "windows": [asdict(w) for w in self.windows]}


def pdms(nc: float, dac: float, ep: float, ttc: float, comfort: float) -> float:
    """NAVSIM's PDM score of one window."""
    weighted = WEIGHTS["ep"] * ep + WEIGHTS["ttc"] * ttc + WEIGHTS["comfort"] * comfort
    return nc * dac * weighted / sum(WEIGHTS.values())


# ------------------------------------------------------------------------------ helpers
def savgol(values: np.ndarray, window: int, order: int, deriv: int, dt: float) -> np.ndarray:
    """Savitzky-Golay derivative of a 1-D signal; edges use the nearest full window."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    window = min(window, n if n % 2 else n - 1)
    if window <= order or n == 0:
        return np.zeros(n)
    half = window // 2
    x = np.arange(-half, half + 1, dtype=np.float64)
    pinv = np.linalg.pinv(np.vander(x, order + 1, increasing=True))     # (order+1, window)
    starts = np.clip(np.arange(n) - half, 0, n - window)
    windows = values[starts[:, None] + np.arange(window)]                 # (n, window)
    coeffs = windows @ pinv.T                                             # (n, order+1)
    at = (np.arange(n) - (starts + half)).astype(np.float64)              # (n,)
    out = np.zeros(n)
    for k in range(deriv, order + 1):
        out += coeffs[:, k] * math.factorial(k) / math.factorial(k - deriv) * at ** (k - deriv)
    return out / dt ** deriv


def comfort_ok(ego: np.ndarray, dt: float, config: ScoreConfig) -> np.ndarray:
    """(T,) bool: every comfort quantity within bounds at that step."""
    if len(ego) < 3:
        return np.ones(len(ego), dtype=bool)
    window = max(3, int(round(config.savgol_window_s / dt)) | 1)
    yaw = np.unwrap(ego[:, 2])
    ax = savgol(ego[:, 0], window, 2, 2, dt)
    ay = savgol(ego[:, 1], window, 2, 2, dt)
    heading = np.stack([np.cos(yaw), np.sin(yaw)], axis=1)
    left = np.stack([-np.sin(yaw), np.cos(yaw)], axis=1)
    acc = np.stack([ax, ay], axis=1)
    lon = np.einsum("ij,ij->i", acc, heading)
    lat = np.einsum("ij,ij->i", acc, left)
    lon_jerk = savgol(lon, window, 2, 1, dt)
    jerk = np.hypot(savgol(ax, window, 2, 1, dt), savgol(ay, window, 2, 1, dt))
    yaw_rate = savgol(yaw, window, 2, 1, dt)
    yaw_acc = savgol(yaw, window, 2, 2, dt)
    b = config.comfort
    return ((lon >= b.min_lon_accel) & (lon <= b.max_lon_accel)
            & (np.abs(lat) <= b.max_abs_lat_accel) & (np.abs(yaw_rate) <= b.max_abs_yaw_rate)
            & (np.abs(yaw_acc) <= b.max_abs_yaw_accel)
            & (np.abs(lon_jerk) <= b.max_abs_lon_jerk) & (np.abs(jerk) <= b.max_abs_jerk))


def ttc_violation(ego: np.ndarray, ego_size: tuple[float, float], others: np.ndarray,
                  config: ScoreConfig) -> bool:
    """Whether, at one step, a constant-velocity projection meets another vehicle within
    the TTC horizon (ego (4,), others (N, 6); see the module docstring)."""
    x, y, yaw, speed = ego
    if speed < config.stationary_speed or len(others) == 0:
        return False
    length, width = ego_size
    reach = speed * config.ttc_horizon_s + length
    taus = np.arange(1, int(round(config.ttc_horizon_s / config.ttc_step_s)) + 1
                     ) * config.ttc_step_s
    ego_dir = np.array([math.cos(yaw), math.sin(yaw)])
    now = box_corners(np.array([x, y]), yaw, length, width)
    for ox, oy, oyaw, ospeed, olength, owidth in others:
        rel = map_to_ego(np.array([ox, oy]), np.array([x, y]), yaw)
        if abs(math.atan2(rel[1], rel[0])) > math.radians(config.ahead_angle_deg):
            continue   # not ahead of the ego (nuPlan's is_agent_ahead)
        if np.hypot(*rel) > reach + ospeed * config.ttc_horizon_s + olength:
            continue
        if boxes_overlap(now, box_corners(np.array([ox, oy]), oyaw, olength, owidth)):
            continue   # already touching: a collision, scored by NC
        other_dir = np.array([math.cos(oyaw), math.sin(oyaw)])
        for tau in taus:
            a = box_corners(np.array([x, y]) + ego_dir * speed * tau, yaw, length, width)
            b = box_corners(np.array([ox, oy]) + other_dir * ospeed * tau, oyaw, olength,
                            owidth)
            if boxes_overlap(a, b):
                return True
    return False


# ------------------------------------------------------------------------------ scoring
def struck_at_fault(ego, others) -> bool:
    """NAVSIM's at-fault test of a moving ego that has collided: at fault unless every
    vehicle touching it (`others`: agent states with xy, length, width; `ego` with yaw too)
    is behind it (it hit us). The standing-still exemption is the caller's."""
    for other in others:
        rel = map_to_ego(other.xy, ego.xy, ego.yaw)
        if np.hypot(*rel) > (ego.length + other.length) / 2 + 1.0:
            continue
        if not (rel[0] < -ego.length / 2 and abs(rel[1]) < (ego.width + other.width) / 2):
            return True
    return False


def score_episode(log: EpisodeLog, config: ScoreConfig = ScoreConfig()) -> EpisodeScore:
    """Score one closed-loop episode (see the module docstring)."""
    per_window = int(round(config.window_s / log.dt))
    n_windows = max(1, math.ceil(log.nominal_steps / per_window))
    last = len(log.ego) - 1
    comfort = comfort_ok(log.ego, log.dt, config)
    ttc_bad = np.array([ttc_violation(log.ego[i], log.ego_size, log.others[i], config)
                        for i in range(len(log.ego))], dtype=bool)
    windows = []
    for k in range(n_windows):
        start = k * per_window
        end = min((k + 1) * per_window, log.nominal_steps)
        crash = log.collision_step
        if crash is not None and start >= crash:
            if log.collision_at_fault:
                windows.append(WindowScore(start * log.dt, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
                continue
            break
        if start >= last:                    # ended early without a collision (cannot
            break                            # happen with the runner, kept for safety)
        stop = min(end, last)
        steps = slice(start, stop + 1)
        nc = 0.0 if (crash is not None and crash <= stop and log.collision_at_fault) else 1.0
        dac = float(log.on_drivable[steps].all())
        ref = log.expert_progress
        expert = ref[min(stop, len(ref) - 1)] - ref[min(start, len(ref) - 1)]
        ego_progress = log.progress[stop] - log.progress[start]
        ep = 1.0 if expert < config.min_expert_progress_m else float(
            np.clip(ego_progress / expert, 0.0, 1.0))
        ttc = 0.0 if ttc_bad[steps].any() else 1.0
        c = float(comfort[steps].all())
        windows.append(WindowScore(round(start * log.dt, 6), nc, dac, round(ep, 6), ttc, c,
                                   round(pdms(nc, dac, ep, ttc, c), 6)))
    score = float(np.mean([w.score for w in windows])) if windows else 0.0
    return EpisodeScore(score=round(score, 6), windows=tuple(windows))


def summarize(scores: list[EpisodeScore]) -> dict:
    """Mean score and mean terms over episodes."""
    if not scores:
        return {"score": 0.0, "terms": {}}
    terms = [s.terms() for s in scores]
    return {"score": round(float(np.mean([s.score for s in scores])), 6),
            "terms": {k: round(float(np.mean([t[k] for t in terms])), 6) for k in terms[0]}}
