"""``wamdiff2 candidates collect``: training frames for the learned candidate scorer.

The closed loop runs a candidates planner (``sim.candidate_planners``) and labels every
frame: each candidate's run-time features and its privileged outcome
(``sim.candidate_oracle``). The ego drives the ``follow`` choice (``greedy``: the state
distribution of a planner without candidates; ``oracle`` or ``scorer`` for others). Same
arguments, same frames: the episodes are the closed loop's (``episode_seed``) and the
decode's sampling is seeded per frame by the planner's settings.
"""
from __future__ import annotations

import json
from pathlib import Path

from wamdiff2_core.atomic_files import write_atomic
from wamdiff2_core.candidates.dataset import frames_header
from wamdiff2_core.sim.candidate_planners import CandidateLog, CandidatePlanner, \
    candidates_planner
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_episode
from wamdiff2_core.sim.generator import episode_seed
from wamdiff2_core.sim.plan_sources import InProcessSource


def collect_frames(planner: CandidatePlanner, config: ClosedLoopConfig, out: str | Path,
                   follow: str = "greedy", settings: dict | None = None,
                   progress: bool = True) -> dict:
    """Run ``config``'s episodes driving ``follow``'s choice and write every labelled frame
    to ``out`` (JSON Lines, written whole at the end); returns a summary (frames, each
    episode's closed-loop score, the log's summary)."""
    from tqdm import tqdm

    log = CandidateLog()
    source = InProcessSource(candidates_planner(planner, follow, log, label=True))
    lines = [json.dumps(frames_header(follow=follow, seed=config.seed,
                                      episodes=config.episodes, **(settings or {})))]
    episodes = []
    try:
        for index in tqdm(range(config.episodes), desc="candidates collect", unit="episode",
                          disable=not progress, dynamic_ncols=True):
            scenario = config.scenarios[index % len(config.scenarios)]
            start = len(log.frames)
            result = run_episode(source, scenario, episode_seed(config.seed, index), index,
                                 config)
            for record in log.frames[start:]:
                record.update(episode=index, scenario=scenario)
                lines.append(json.dumps(record))
            episodes.append({"index": index, "scenario": scenario,
                             "score": result.score.score, "failure": result.failure})
    finally:
        source.close()
    write_atomic(Path(out), ("\n".join(lines) + "\n").encode())
    return {"out": str(out), "frames": len(lines) - 1, "episodes": episodes,
            "candidates": log.summary()}
