"""The planning path: one job in, one outcome out, never an exception, never a publish.

`Planning.plan(job, cancel)` turns a frame into a `PlanOutcome`: the model's plan, or the
fallback (`fallback.py`) with the reason the model's plan is missing (`camera_missing`,
`camera_late`: a camera without an image for the frame, named; `parse_failures`,
`model_errors`, `plan_timeouts`, `odometry_stale`), or a refusal that publishes no Path
(`stale_frames`: checked right before the model runs). The frame's ego motion is the
odometry at the image's stamp (`OdometryTracker.motion_at`). `answer(job, cancel)` turns a
question into an `AnswerOutcome`, `detect(job, cancel)` a frame into its detections.

These run on the scheduler's model lane (`scheduler.py`), which publishes each outcome once
(`publishing.py`); `cancel` (a threading.Event) stops the decode before its next forward
pass (`wamdiff2_core.decoding.cancel`), and a cancelled job's outcome is never published.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from wamdiff2_core.decoding import DecodeCancelled
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
    counter of its outcome (`questions_answered`, `questions_refused`, `answer_failures`);
    `cancelled`: its decode was stopped (the scheduler refuses it with its own reason)."""

    text: str
    counter: str
    level: bytes = OK
    kind: str = ""               # the problem's counter, e.g. question_too_long
    message: str = ""
    cancelled: bool = False


class Planning:
    """The planning path of one node: odometry read, last plan kept. Its methods run the
    model on the calling thread (the scheduler's lane)."""

    def __init__(self, odometry: OdometryTracker, now_s: Callable[[], float], log):
        self._odometry, self._now_s, self.log = odometry, now_s, log
        self.last_plan = LastPlan()

    # ------------------------------------------------------------------ frames
    def plan(self, job: FrameJob, cancel: threading.Event | None = None) -> PlanOutcome:
        """The outcome of planning `job`'s frame (see the module docstring)."""
        refusal = self.refusal(job)
        if refusal is not None:
            return refusal
        motion = self._odometry.motion_at(job.frame.stamp)
        if job.gaps:
            kind, detail = describe_gaps(job.gaps)
            return self._fallback(job, motion, kind, f"frame {job.frame.stamp:.3f}: {detail}; "
                                  "fallback published", WARN, detail=detail)
        stale = self._odometry_stale(job, motion)
        if stale is not None:
            return self._fallback(job, motion, "odometry_stale", f"{stale}; fallback "
                                  "published", WARN)
        return self._ask_model(job, motion, cancel)

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

    def timed_out(self, job: FrameJob, cancelled: bool = True) -> PlanOutcome:
        """The fallback of a frame not planned within `plan_timeout_s` of its arrival."""
        timeout = job.settings.config.plan_timeout_s
        return self._fallback(job, self._odometry.motion_at(job.frame.stamp), "plan_timeouts",
                              f"frame {job.frame.stamp:.3f} not planned within plan_timeout_s "
                              f"{timeout:g} of its arrival; fallback published"
                              + ("; its decode cancelled" if cancelled else ""), ERROR,
                              ms=(time.monotonic() - job.frame.received) * 1e3, ran=False)

    def fallback(self, job: FrameJob, failure: str, message: str, level: bytes) -> PlanOutcome:
        """The fallback outcome of `job` for a reason of the caller's (the watchdog's)."""
        return self._fallback(job, self._odometry.motion_at(job.frame.stamp), failure,
                              message, level)

    def _ask_model(self, job: FrameJob, motion: EgoMotion,
                   cancel: threading.Event | None) -> PlanOutcome:
        frame, settings = job.frame, job.settings
        obs = Observation(images=list(frame.images), command=settings.command,
                          velocity=motion.velocity, acceleration=motion.acceleration,
                          stamp=frame.stamp)
        start = time.monotonic()
        try:
            result = settings.planner.plan(obs, cancel=cancel)
        except DecodeCancelled:
            return self.timed_out(job)
        except AnswerParseError as exc:
            return self._fallback(job, motion, "parse_failures", f"planning answer for frame "
                                  f"{frame.stamp:.9f} did not parse: {clip(exc.reason, 200)}",
                                  ERROR, ms=(time.monotonic() - start) * 1e3,
                                  stats=getattr(exc, "stats", None), text=exc.raw_text or "")
        except Exception as exc:  # noqa: BLE001 - a model failure costs this frame's plan only
            self.log.debug(traceback.format_exc())
            return self._fallback(job, motion, "model_errors", f"planning frame "
                                  f"{frame.stamp:.9f} raised {type(exc).__name__}: "
                                  f"{clip(str(exc), 200)}", ERROR,
                                  ms=(time.monotonic() - start) * 1e3)
        plan = Plan(frame.stamp, result.waypoints)        # remembered once published
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

    def detect(self, job: FrameJob, cancel: threading.Event | None = None
               ) -> tuple[list, str | None, str]:
        """The frame's detections, and (when they failed: the empty list) the counter and
        the reason; a frame lacking a camera has none, its gap already reported); a
        cancelled detection (the next frame needs the model) is `detections_cancelled`."""
        frame = job.frame
        if job.gaps:
            return [], None, ""
        try:
            return job.settings.planner.detect(list(frame.images), cancel=cancel
                                               ).detections, None, ""
        except DecodeCancelled:
            return [], "detections_cancelled", (f"detection on frame {frame.stamp:.3f} "
                                                "cancelled: the next frame needed the model; "
                                                "an empty Detection2DArray published")
        except AnswerParseError as exc:
            return [], "parse_failures", (f"detection answer for frame {frame.stamp:.9f} did "
                                          f"not parse: {clip(exc.reason, 200)}; an empty "
                                          "Detection2DArray published")
        except Exception as exc:  # noqa: BLE001
            return [], "model_errors", (f"detection on frame {frame.stamp:.9f} raised "
                                        f"{type(exc).__name__}: {clip(str(exc), 200)}; an "
                                        "empty Detection2DArray published")

    # --------------------------------------------------------------- questions
    def answer(self, job: QuestionJob, cancel: threading.Event | None = None
               ) -> AnswerOutcome:
        """The outcome of answering `job`'s question on its frame."""
        question, echo = job.question, job.settings.config.max_echo_chars
        if job.gaps:
            kind, detail = describe_gaps(job.gaps)
            return AnswerOutcome("", "questions_refused", WARN, kind,
                                 f"question {clip(question, echo)} refused: {detail}")
        try:
            text = job.settings.planner.answer(list(job.frame.images), question,
                                               cancel=cancel).text
        except DecodeCancelled:
            return AnswerOutcome("", "questions_refused", WARN, "question_preempted",
                                 f"question {clip(question, echo)} refused: a frame needed "
                                 "the model (planning comes first)", cancelled=True)
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
