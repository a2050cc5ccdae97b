"""Top-down plots of closed-loop episodes (matplotlib, Agg backend, PNG)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _lane_lines(lanes, step: float = 2.0, around: np.ndarray | None = None,
                margin: float = 60.0):
    """Edge polylines of the lanes near the points ``around`` (map frame)."""
    lines = []
    for lane in lanes:
        s = np.linspace(0.0, lane.length, max(2, int(lane.length / step) + 1))
        centre = lane.points(s)
        if around is not None:
            lo, hi = around.min(axis=0) - margin, around.max(axis=0) + margin
            inside = ((centre >= lo) & (centre <= hi)).all(axis=1)
            if not inside.any():
                continue
            idx = np.nonzero(inside)[0]
            s = s[max(idx[0] - 1, 0):idx[-1] + 2]
        for side in (+0.5, -0.5):
            lines.append(lane.points(s, side * lane.width))
    return lines


def plot_episode(result, path: str | Path, planner_name: str) -> None:
    """Lanes, the expert's path, the ego's driven path, other vehicles' tracks, the
    collision point and off-road steps of one episode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = result.log
    ego = log.ego[:, :2]
    around = np.vstack([ego, result.expert_path])
    lo, hi = around.min(axis=0) - 15.0, around.max(axis=0) + 15.0
    width, height = hi - lo
    ratio = float(np.clip(height / width, 0.25, 0.9))      # long roads get wide figures
    fig, ax = plt.subplots(figsize=(9, 1.2 + 9 * ratio), dpi=100)
    for line in _lane_lines(result.lanes, around=around, margin=15.0):
        ax.plot(line[:, 0], line[:, 1], color="0.75", lw=0.6, zorder=1)
    for track in result.others_tracks.values():
        track = track[((track >= lo) & (track <= hi)).all(axis=1)]   # only what is near
        if len(track) > 1:
            ax.plot(track[:, 0], track[:, 1], color="0.45", lw=0.8, alpha=0.6, zorder=2)
            ax.plot(*track[-1], marker="s", ms=3, color="0.35", zorder=2)
    ax.plot(result.expert_path[:, 0], result.expert_path[:, 1], "--", color="tab:green",
            lw=1.5, label="expert (reference)", zorder=3)
    ax.plot(ego[:, 0], ego[:, 1], color="tab:blue", lw=2.0, label=planner_name, zorder=4)
    ax.plot(*ego[0], marker="o", color="tab:blue", zorder=5)
    off = ~log.on_drivable
    if off.any():
        ax.scatter(ego[off, 0], ego[off, 1], s=8, color="tab:orange", label="off road",
                   zorder=5)
    if log.collision_step is not None:
        ax.scatter(*ego[min(log.collision_step, len(ego) - 1)], s=120, marker="x",
                   color="tab:red", label="collision", zorder=6)
    ax.plot([lo[0], hi[0]], [lo[1], hi[1]], alpha=0.0)     # margins for autoscaling
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_title(f"episode {result.index}: {result.scenario}, seed {result.seed}, "
                 f"score {result.score.score:.3f}", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_scores(results, path: str | Path, planner_name: str,
                interval: list[float] | None = None) -> None:
    """Bar chart of episode scores, their mean and (``interval``) its 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(5, 0.5 * len(results) + 3), 3.5), dpi=100)
    x = np.arange(len(results))
    ax.bar(x, [r.score.score for r in results], color="tab:blue")
    ax.set_xticks(x, [f"{r.index}\n{r.scenario[:5]}" for r in results], fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("episode score")
    mean = np.mean([r.score.score for r in results]) if results else 0.0
    ax.axhline(mean, color="tab:red", lw=1, ls="--", label=f"mean {mean:.3f}")
    if interval is not None:
        ax.axhspan(interval[0], interval[1], color="tab:red", alpha=0.15,
                   label=f"95% interval [{interval[0]:.3f}, {interval[1]:.3f}]")
    ax.set_title(f"closed loop: {planner_name}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_timing(results, path: str | Path, planner_name: str, max_episodes: int = 6) -> None:
    """Age of the plan being followed over simulated time (one line per episode; a dot
    where a plan arrived, at its latency) and the latency histogram."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, hist) = plt.subplots(1, 2, figsize=(10, 3.5), dpi=100,
                                   gridspec_kw={"width_ratios": [3, 1]})
    for result in results[:max_episodes]:
        s = result.stats
        line, = ax.step(s.age_times_s, s.plan_ages_s, where="post", lw=1,
                        label=f"{result.index} {result.scenario[:5]}")
        ax.plot(s.arrivals_s, s.latencies_s, ".", color=line.get_color(), ms=4)
    ax.set_xlabel("simulated time [s]")
    ax.set_ylabel("age of the followed plan [s]")
    ax.set_title(f"{planner_name}: plan age (line), latency at arrival (dots)", fontsize=9)
    if results:
        ax.legend(fontsize=7, loc="upper right")
    latencies = [1e3 * x for r in results for x in r.stats.latencies_s]
    hist.hist(latencies, bins=20, color="tab:blue")
    hist.set_xlabel("latency [ms]")
    hist.set_ylabel("plans")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
