"""Closed-loop episodes over worker processes, each episode's result independent of how many.

An episode depends only on its planner, its scenario and seed (``closed_loop``: episode
``i`` is scenario ``scenarios[i % n]`` with world seed ``episode_seed(seed, i)``) and on
nothing an earlier episode left behind: worlds are built per episode, and a planner's
sampling is seeded per decode. So episodes may run in any order on any number of
processes. What could still tell the processes apart is torch's CPU thread count (a matrix
product's summation order may follow it), so every worker, also the single in-process one
of ``workers=1``, plans on ``threads`` threads (1 by default): per-episode results are then
the same, bit for bit, for any ``workers`` (tested with 1 and 2).

A planner is described by a :class:`PlannerRecipe` (picklable: a spec and settings, no
model) and built once per worker process, on its first episode (a planner that cannot be
built is a :class:`PlannerBuildError` with the reason, raised in the caller). Workers are
started with ``spawn`` (no fork of a process holding torch threads or a ROS context).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from wamdiff2_core.sim.candidate_planners import CandidateLog, candidates_planner
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, EpisodeResult, run_episode
from wamdiff2_core.sim.generator import episode_seed
from wamdiff2_core.sim.plan_sources import InProcessSource
from wamdiff2_core.sim.planners import PlannerFn, check_rig, make_planner


class PlannerBuildError(ValueError):
    """A planner recipe that cannot be built (one sentence with the reason)."""


@dataclass(frozen=True)
class PlannerRecipe:
    """How to build a closed-loop planner in any process: ``spec`` as ``--planner`` takes it
    (expert | constant-velocity | checkpoint:DIR), and for a checkpoint the ``Planner``
    settings (``decode``: a DecodeConfig or None for the checkpoint's own; ``candidates``:
    a CandidateConfig with its ``scorer_weights`` and whose ``choice`` is driven; ``label``:
    run the candidate oracle on every frame; ``verifier`` / ``exact``: exact mode's)."""

    spec: str
    decode: object = None
    candidates: object = None
    scorer_weights: str | None = None
    choice: str = "scorer"
    label: bool = False
    verifier: str | None = None
    exact: object = None

    @property
    def uses_candidates(self) -> bool:
        return self.candidates is not None and self.candidates.enabled

    def build(self, cameras: tuple[str, ...] | None = None
              ) -> tuple[PlannerFn, CandidateLog | None]:
        """The planner function (and the log its candidates are recorded in, if any);
        PlannerBuildError when the spec or a setting is wrong."""
        name, _, path = self.spec.partition(":")
        try:
            if name != "checkpoint" or not path or not self._needs_planner():
                if self.uses_candidates:
                    raise ValueError(f"candidates apply to checkpoint planners, not "
                                     f"{self.spec!r}")
                return make_planner(self.spec, self.decode, cameras), None
            return self._checkpoint(path, cameras)
        except (ValueError, FileNotFoundError, OSError) as exc:
            raise PlannerBuildError(f"cannot load planner {self.spec!r}: {exc}") from None

    def _needs_planner(self) -> bool:
        """Whether plain ``make_planner`` would not do (candidates or exact-mode settings)."""
        return (self.uses_candidates or self.verifier is not None
                or self.exact is not None or self.scorer_weights is not None)

    def planner_config(self):
        """The ``PlannerConfig`` of a checkpoint planner of this recipe (None settings:
        the defaults)."""
        from wamdiff2_core.planner_config import PlannerConfig

        return PlannerConfig(self.decode, candidates=self.candidates,
                             scorer_weights=self.scorer_weights, verifier=self.verifier,
                             exact=self.exact)

    def _checkpoint(self, path: str, cameras) -> tuple[PlannerFn, CandidateLog | None]:
        from wamdiff2_core.planner import Planner  # torch and transformers load here

        planner = Planner.from_pretrained(path, self.planner_config())
        check_rig(planner.model.fields.cameras, cameras, f"checkpoint {path}")
        if not self.uses_candidates:
            return (lambda observation, image: planner.plan(observation)), None
        log = CandidateLog()
        return candidates_planner(planner, self.choice, log, self.label), log


@dataclass
class EpisodeRun:
    """One finished episode: which recipe drove it, its result, and the candidate frames it
    logged (empty without candidates)."""

    key: str
    result: EpisodeResult
    frames: list


# ------------------------------------------------------------------------------ workers
_STATE: dict = {}


def _worker_setup(recipes: dict[str, PlannerRecipe], config: ClosedLoopConfig,
                  threads: int) -> None:
    """A pool worker's start: Ctrl-C reaches the whole process group, and only the parent
    should act on it (it stops the pool), not every worker with a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _setup(recipes, config, threads)


def _setup(recipes: dict[str, PlannerRecipe], config: ClosedLoopConfig, threads: int) -> None:
    """A worker's start: what it will drive, torch on ``threads`` threads (when torch is
    needed at all), no planner built yet."""
    _STATE.clear()
    _STATE.update(recipes=recipes, config=config, built={})
    if any(r.spec.startswith("checkpoint") for r in recipes.values()):
        import torch

        torch.set_num_threads(threads)


def _episode(task: tuple[str, int]) -> EpisodeRun:
    """Drive episode ``index`` with recipe ``key`` (its planner built on first use)."""
    key, index = task
    config: ClosedLoopConfig = _STATE["config"]
    built = _STATE["built"]
    if key not in built:
        planner, log = _STATE["recipes"][key].build(config.camera.names)
        built[key] = (InProcessSource(planner), log)
    source, log = built[key]
    if log is not None:
        log.frames.clear()
    scenario = config.scenarios[index % len(config.scenarios)]
    result = run_episode(source, scenario, episode_seed(config.seed, index), index, config)
    return EpisodeRun(key, result, list(log.frames) if log is not None else [])


def default_workers() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                            # not Linux
        return max(1, os.cpu_count() or 1)


def run_episodes(recipes: dict[str, PlannerRecipe], config: ClosedLoopConfig,
                 tasks: Sequence[tuple[str, int]], workers: int = 1, threads: int = 1
                 ) -> Iterator[EpisodeRun]:
    """Run ``tasks`` (recipe key, episode index) and yield each as it finishes (in any
    order with several workers). ``workers`` 1 runs them here, in order; more start that
    many spawned processes (never more than there are tasks)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    unknown = {key for key, _ in tasks} - set(recipes)
    if unknown:
        raise ValueError(f"tasks name unknown planners {sorted(unknown)}")
    if not tasks:
        return
    workers = min(workers, len(tasks))
    if workers == 1:
        yield from _in_process(recipes, config, tasks, threads)
        return
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(workers, initializer=_worker_setup,
                        initargs=(recipes, config, threads))
    try:
        yield from pool.imap_unordered(_episode, list(tasks), chunksize=1)
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def _in_process(recipes, config, tasks, threads) -> Iterator[EpisodeRun]:
    """The episodes in this process, on ``threads`` torch threads as a worker would be
    (the caller's thread count is restored afterwards)."""
    before = _torch_threads()
    saved = dict(_STATE)
    _setup(recipes, config, threads)
    try:
        for task in tasks:
            yield _episode(task)
    finally:
        for source, _ in _STATE.get("built", {}).values():
            source.close()
        _STATE.clear()
        _STATE.update(saved)
        if before is not None:
            import torch

            torch.set_num_threads(before)


def _torch_threads() -> int | None:
    """torch's thread count when torch is already loaded (None: not loaded, nothing to
    restore)."""
    import sys

    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def drive(recipe: PlannerRecipe, config: ClosedLoopConfig, workers: int = 1,
          progress: bool = True, threads: int = 1
          ) -> tuple[list[EpisodeResult], CandidateLog | None]:
    """Episodes ``0 .. config.episodes - 1`` driven by ``recipe`` on ``workers`` processes,
    in index order, and (a candidates planner) every frame's candidate record, in episode
    order; the same results as ``closed_loop.run_closed_loop`` for any ``workers``."""
    from tqdm import tqdm

    runs = []
    tasks = [("planner", index) for index in range(config.episodes)]
    with tqdm(total=len(tasks), desc="eval closed-loop", unit="episode", disable=not progress,
              dynamic_ncols=True) as bar:
        for run in run_episodes({"planner": recipe}, config, tasks, workers, threads):
            runs.append(run)
            bar.update(1)
    runs.sort(key=lambda run: run.result.index)
    log = CandidateLog([frame for run in runs for frame in run.frames]) \
        if recipe.uses_candidates else None
    return [run.result for run in runs], log
