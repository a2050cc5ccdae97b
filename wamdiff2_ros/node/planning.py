"""The planning path: one job in, one outcome out, never an exception, never a publish.

`Planning.plan(job)` turns a frame into a `PlanOutcome`: the model's plan, or the fallback
(`fallback.py`) with the reason the model's plan is missing (`camera_missing`,
`camera_late`: a camera without an image for the frame, named; `parse_failures`,
`model_errors`, `plan_timeouts`, `odometry_stale`), or a refusal that publishes no Path
(`stale_frames`). `answer(job)` turns a question into an `AnswerOutcome`.
The node's worker publishes each outcome once (`publishing.py`).

The model runs on a thread of its own (`ModelThread`), so that a plan past `plan_timeout_s`
becomes the `plan_timeouts` outcome at its deadline while the model finishes; its late answer
is dropped, and the next job waits for it.
"""
from __future__ import annotations

import queue
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from wamdiff2_core.decoding.config import DecodeStats
from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.types import Observation, PromptTooLong
from wamdiff2_ros.node.diagnostics import ERROR, OK, WARN
from wamdiff2_ros.node.fallback import LastPlan, Plan, fallback_plan
from wamdiff2_ros.node.logs import clip
from wamdiff2_ros.node.odometry import EgoMotion, OdometryTracker
from wamdiff2_ros.node.worker import FrameJob, QuestionJob, describe_gaps


@dataclass(frozen=True)
class PlanOutcome:
    """What became of one frame: its Path's plan (None: refused, nothing published), why,
    and what the model's answer was (the frame's `~/output/stats`)."""

    job: FrameJob
    plan: Plan | None
    failure: str = ""            # the counter of what failed; "" for the model's own plan
    message: str = ""            # why, in words (empty for the model's own plan)
    level: bytes = OK
    bad_input: bool = False      # a refusal caused by the input (counted as bad_input too)
    motion: EgoMotion = EgoMotion()
    parsed: bool = False
    ms: float = 0.0              # wall time of the planner call (0: not called)
    stats: DecodeStats | None = None
    text: str = ""               # the model's raw answer
    candidates: Any = None       # the frame's candidates.CandidateSet (K > 1), its choice the plan
    planner_ms: float | None = None   # the planner's own time; None when it did not run
    detail: str = ""             # which inputs a fallback lacked (the cameras, named)

    @property
    def refused(self) -> bool:
        return self.plan is None

    @property
    def source(self) -> str:
        return "" if self.plan is None else self.plan.source


@dataclass(frozen=True)
class AnswerOutcome:
    """What became of one question: the answer to publish (non-blank when answered) and the
    counter of its outcome (`questions_answered`, `questions_refused`, `answer_failures`)."""

    text: str
    counter: str
    level: bytes = OK
    kind: str = ""               # the problem's counter, e.g. question_too_long
    message: str = ""


class ModelThread:
    """The one thread that runs the planner; a call can be waited for with a timeout.

    A daemon thread, but `close` waits for a plan still running past its deadline: a process
    that exits while the thread is inside torch aborts ("terminate called without an active
    exception", exit -6) instead of ending cleanly."""

    def __init__(self):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._late: Future | None = None
        self._thread = threading.Thread(target=self._run, name="wamdiff2-model", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            future, fn, args = call
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)

    def call(self, fn: Callable[..., Any], *args, timeout_s: float | None = None) -> Any:
        """`fn(*args)` on the model thread: its result or its exception; TimeoutError after
        `timeout_s` (None: no limit) of running, the call then left to finish. A call that
        is still running when the next comes is waited for first."""
        if self._late is not None:
            self._late.exception()           # the late answer is dropped, not raised
            self._late = None
        future: Future = Future()
        self._calls.put((future, fn, args))
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if future.done():                # fn raised TimeoutError itself
                raise RuntimeError(f"the model raised {future.exception()!r}") from None
            self._late = future
            raise

    def close(self, timeout_s: float = 60.0) -> bool:
        """End the thread after the call it runs (if any), waiting up to `timeout_s`; True
        once it has ended."""
        self._calls.put(None)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


class Planning:
    """The planning path of one node: odometry read, last plan kept, the model's thread."""

    def __init__(self, odometry: OdometryTracker, now_s: Callable[[], float], log):
        self._odometry, self._now_s, self._log = odometry, now_s, log
        self.last_plan = LastPlan()
        self._model = ModelThread()

    def close(self) -> bool:
        """Stop the model's thread (see ModelThread.close); True once it has ended."""
        return self._model.close()

    # ------------------------------------------------------------------ frames
    def plan(self, job: FrameJob) -> PlanOutcome:
        """The outcome of planning `job`'s frame (see the module docstring)."""
        refusal = self.refusal(job)
        if refusal is not None:
            return refusal
        motion = self._odometry.motion()
        if job.gaps:
            kind, detail = describe_gaps(job.gaps)
            return self._fallback(job, motion, kind, f"frame {job.frame.stamp:.3f}: {detail}; "
                                  "fallback published", WARN, detail=detail)
        stale = self._odometry_stale(job, motion)
        if stale is not None:
            return self._fallback(job, motion, "odometry_stale", f"{stale}; fallback "
                                  "published", WARN)
        return self._ask_model(job, motion)

    def refusal(self, job: FrameJob) -> PlanOutcome | None:
        """The outcome of a frame that is not worked on at all (too old), or None."""
        frame, config = job.frame, job.settings.config
        age = self._now_s() - frame.stamp
        if config.max_input_age_s > 0 and age > config.max_input_age_s:
            return PlanOutcome(job, None, "stale_frames", f"frame {frame.stamp:.3f} is "
                               f"{age:.2f} s old (max_input_age_s {config.max_input_age_s:g}); "
                               "dropped", WARN)
        return None

    def _odometry_stale(self, job: FrameJob, motion: EgoMotion) -> str | None:
        """Why the odometry is too old to plan this frame with, or None."""
        limit, stamp = job.settings.config.max_odometry_age_s, job.frame.stamp
        if limit <= 0:
            return None
        if motion.stamp is None:
            return f"no odometry yet for frame {stamp:.3f}"
        if stamp - motion.stamp > limit:
            return (f"odometry {stamp - motion.stamp:.2f} s older than frame {stamp:.3f} "
                    f"(max_odometry_age_s {limit:g})")
        return None

    def _ask_model(self, job: FrameJob, motion: EgoMotion) -> PlanOutcome:
        frame, settings = job.frame, job.settings
        timeout = settings.config.plan_timeout_s
        obs = Observation(images=list(frame.images), command=settings.command,
                          velocity=motion.velocity, acceleration=motion.acceleration,
                          stamp=frame.stamp)
        start = time.monotonic()
        try:
            result = self._model.call(settings.planner.plan, obs, timeout_s=timeout or None)
        except TimeoutError:
            return self._fallback(job, motion, "plan_timeouts", f"frame {frame.stamp:.3f} not "
                                  f"planned within plan_timeout_s {timeout:g}; fallback "
                                  "published", ERROR, ms=(time.monotonic() - start) * 1e3,
                                  ran=False)
        except AnswerParseError as exc:
            return self._fallback(job, motion, "parse_failures", f"planning answer for frame "
                                  f"{frame.stamp:.9f} did not parse: {clip(exc.reason, 200)}",
                                  ERROR, ms=(time.monotonic() - start) * 1e3,
                                  stats=getattr(exc, "stats", None), text=exc.raw_text or "")
        except Exception as exc:  # noqa: BLE001 - a model failure costs this frame's plan only
            self._log.debug(traceback.format_exc())
            return self._fallback(job, motion, "model_errors", f"planning frame "
                                  f"{frame.stamp:.9f} raised {type(exc).__name__}: "
                                  f"{clip(str(exc), 200)}", ERROR,
                                  ms=(time.monotonic() - start) * 1e3)
        plan = Plan(frame.stamp, result.waypoints)
        self.last_plan.remember(plan)
        return PlanOutcome(job, plan, motion=motion, parsed=True,
                           ms=(time.monotonic() - start) * 1e3, stats=result.stats,
                           text=result.text, planner_ms=result.stats.total_ms,
                           candidates=result.candidates)

    def _fallback(self, job: FrameJob, motion: EgoMotion, failure: str, message: str,
                  level: bytes, ms: float = 0.0, stats: DecodeStats | None = None,
                  text: str = "", ran: bool = True, detail: str = "") -> PlanOutcome:
        """The fallback's outcome; `ms`: the planner call's wall time (0: not called),
        `ran`: whether it finished (its time counts as the planner's)."""
        speed = motion.velocity[0] if motion.stamp is not None else 0.0
        plan = fallback_plan(job.settings.config, self.last_plan.get(), job.frame.stamp,
                             speed)
        return PlanOutcome(job, plan, failure, message, level, motion=motion, ms=ms,
                           stats=stats, text=text, planner_ms=ms if ms and ran else None,
                           detail=detail)

    def detect(self, job: FrameJob) -> tuple[list, str | None, str]:
        """The frame's detections, and (when they failed: the empty list) the counter and
        the reason; a frame lacking a camera has none, its gap already reported)."""
        frame = job.frame
        if job.gaps:
            return [], None, ""
        try:
            return self._model.call(job.settings.planner.detect, list(frame.images)
                                    ).detections, None, ""
        except AnswerParseError as exc:
            return [], "parse_failures", (f"detection answer for frame {frame.stamp:.9f} did "
                                          f"not parse: {clip(exc.reason, 200)}; an empty "
                                          "Detection2DArray published")
        except Exception as exc:  # noqa: BLE001
            return [], "model_errors", (f"detection on frame {frame.stamp:.9f} raised "
                                        f"{type(exc).__name__}: {clip(str(exc), 200)}; an "
                                        "empty Detection2DArray published")

    # --------------------------------------------------------------- questions
    def answer(self, job: QuestionJob) -> AnswerOutcome:
        """The outcome of answering `job`'s question on its frame."""
        question, echo = job.question, job.settings.config.max_echo_chars
        if job.gaps:
            kind, detail = describe_gaps(job.gaps)
            return AnswerOutcome("", "questions_refused", WARN, kind,
                                 f"question {clip(question, echo)} refused: {detail}")
        try:
            text = self._model.call(job.settings.planner.answer, list(job.frame.images),
                                    question).text
        except PromptTooLong as exc:
            return AnswerOutcome("", "questions_refused", WARN, "question_too_long",
                                 f"question {clip(question, echo)} refused: {exc}")
        except AnswerParseError as exc:
            return AnswerOutcome("", "answer_failures", ERROR, "answer_parse_failures",
                                 f"answer to {clip(question, echo)} did not parse: "
                                 f"{clip(exc.reason, 200)}")
        except Exception as exc:  # noqa: BLE001
            return AnswerOutcome("", "answer_failures", ERROR, "model_errors",
                                 f"answering {clip(question, echo)} raised "
                                 f"{type(exc).__name__}: {clip(str(exc), 200)}")
        return AnswerOutcome(text, "questions_answered")
