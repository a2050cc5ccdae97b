"""The model lane: one thread owns the model and runs one job at a time, planning first.

A job's way reads top to bottom in `Scheduler._run_frame`: take the job (`_next`), plan it
(`Planning.plan`: one `PlanOutcome`), publish that once (`NodeOutputs`). The policy
(docs/ros.md, "Timing contract"):

1. A frame ready to plan (its cameras in sync or its sync wait over) is always taken first.
2. Its deadline is `plan_timeout_s` after its trigger image arrived. At the deadline the
   supervisor thread publishes the `plan_timeouts` fallback at once and sets the decode's
   cancel flag: the decode stops before its next forward pass, and its result, if any, is
   dropped (each frame's `Ticket` is claimed once: by the lane, the deadline or the
   watchdog). A frame taken after its deadline (the lane was inside one long forward) gets
   the fallback without running the model; the input-age check runs right before the model.
3. Detection (if a task) runs after the frame's Path went out; questions run only when no
   frame waits and the expected answer time (a running mean) ends before the next expected
   frame (the trigger camera's period from its arrivals). A running detection or question
   is cancelled the moment a frame is ready: the question is refused (`question_preempted`),
   the detection comes out empty (`detections_cancelled`).
4. A question not begun `question_timeout_s` after it arrived is refused
   (`question_timeout`); a full queue refuses its oldest (`questions_dropped`). Refusals
   publish an empty answer, are counted in `questions_refused` and reported.

Nothing a callback queues can hold the model: frames replace each other (newest wins),
questions wait in a bounded queue behind frames, and parameter rebuilds warm up on a thread
of their own (`rebuild.py`) in the lane's idle time.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from wamdiff2_ros.node.diagnostics import ERROR, WARN
from wamdiff2_ros.node.fallback import MODEL
from wamdiff2_ros.node.logs import clip
from wamdiff2_ros.node.planning import AnswerOutcome, Planning, PlanOutcome
from wamdiff2_ros.node.publishing import NodeOutputs, status_marker
from wamdiff2_ros.node.worker import FrameJob, Inbox, Question, QuestionJob

PLAN, DETECT, QUESTION = "plan", "detect", "question"      # what the lane runs


class Ticket:
    """A frame's one right to publish: the first `claim` wins (lane, deadline, watchdog)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._claimed = False

    def claim(self) -> bool:
        with self._lock:
            first, self._claimed = not self._claimed, True
            return first


@dataclass
class Running:
    """The job on the lane now."""

    kind: str                                   # PLAN | DETECT | QUESTION
    job: FrameJob | QuestionJob
    deadline: float | None = None               # monotonic; None: none (PLAN only)
    ticket: Ticket | None = None                # PLAN only
    cancel: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    expired: bool = False                       # its deadline passed (the supervisor's)


class MeanTime:
    """A running mean of durations (exponential, seconds); None before the first."""

    def __init__(self, weight: float = 0.3):
        self.value: float | None = None
        self._weight = weight

    def add(self, seconds: float) -> None:
        self.value = seconds if self.value is None else \
            (1 - self._weight) * self.value + self._weight * seconds


class Scheduler:
    """The model lane (`start`: its thread and the deadline supervisor's) over `inbox`."""

    def __init__(self, inbox: Inbox, planning: Planning, outputs: NodeOutputs,
                 on_crash: Callable[[BaseException], None]):
        self.inbox, self.planning, self.outputs = inbox, planning, outputs
        self._on_crash = on_crash
        self.running: Running | None = None
        self.answer_time, self.plan_time = MeanTime(), MeanTime()
        self.started = time.monotonic()
        self._next_frame_at = 0.0                # max_planning_rate_hz
        self._last_settings = None               # of the last frame taken (the watchdog's)
        self._last_refusal = ""                  # why the last frame published no Path
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._lane, name="wamdiff2-model",
                                          daemon=True),
                         threading.Thread(target=self._supervise, name="wamdiff2-deadlines",
                                          daemon=True)]

    def start(self, lane: bool = True) -> None:
        """Start the deadline supervisor and (unless `lane` is False: a caller that `run`s
        jobs itself, as the tests do) the lane."""
        self.started = time.monotonic()
        for thread in self._threads[0 if lane else 1:]:
            thread.start()

    def stop(self, timeout: float = 60.0) -> bool:
        """Cancel the running job, end both threads; True if they ended within `timeout`
        (a forward pass in flight is waited for: a process exiting inside torch aborts)."""
        self._stop.set()
        running = self.running
        if running is not None:
            running.cancel.set()
        self.inbox.close()
        end = time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, end - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def plan_busy(self) -> bool:
        """A frame waits or is being planned (a rebuild's warm-up yields to it)."""
        running = self.running
        return self.inbox.frame_pending() or (running is not None and running.kind == PLAN)

    def _set_running(self, running: Running | None) -> None:
        with self.inbox.cond:
            self.running = running
            self.inbox.cond.notify_all()         # the supervisor watches its deadline

    # ------------------------------------------------------------------ the lane
    def _lane(self) -> None:
        while not self._stop.is_set():
            job = self._next()
            if job is not None:
                self.run(job)

    def run(self, job: FrameJob | QuestionJob) -> None:
        """One job on the calling thread (the lane's); never raises (`on_crash` is told)."""
        try:
            if isinstance(job, FrameJob):
                self._run_frame(job)
            else:
                self._run_question(job)
        except Exception as exc:  # noqa: BLE001 - the lane must survive any job
            self.planning.log.debug(traceback.format_exc())
            self._on_crash(exc)
        finally:
            self._set_running(None)

    def _next(self) -> FrameJob | QuestionJob | None:
        """The next job by the policy; None after half a second with nothing, or closed."""
        refused: list[Question] = []
        job = None
        with self.inbox.cond:
            give_up = time.monotonic() + 0.5
            while not self.inbox.closed and job is None:
                now = time.monotonic()
                if now >= self._next_frame_at:
                    job = self.inbox.ready_frame(now)
                if job is None:
                    refused += self._expired_questions(now)
                    question = self._question_that_fits(now)
                    if question is not None:
                        job = self.inbox.question_job(question)
                if job is None:
                    if now >= give_up:
                        break
                    self.inbox.cond.wait(max(0.001, self._wake_at(now, give_up) - now))
            if isinstance(job, FrameJob):
                self._last_settings = job.settings
                rate = job.settings.config.max_planning_rate_hz
                self._next_frame_at = time.monotonic() + (1.0 / rate if rate > 0 else 0.0)
        for question in refused:
            self._refuse(question.text, question.settings, "question_timeout",
                         f"not begun within question_timeout_s "
                         f"{question.settings.config.question_timeout_s:g} (planning comes "
                         "first)")
        return job

    def _wake_at(self, now: float, give_up: float) -> float:
        """When to look again (new inputs wake the lane at once)."""
        times = [give_up]
        sync = self.inbox.sync_ends()
        if sync is not None:
            times.append(max(sync, self._next_frame_at))
        times += [q.deadline for q in self.inbox.questions]
        if self.inbox.questions:
            times.append(now + 0.02)                 # the frame estimate moves with time
        return min(times)

    def _expired_questions(self, now: float) -> list[Question]:
        expired = [q for q in self.inbox.questions if now > q.deadline]
        for question in expired:
            self.inbox.questions.remove(question)
        return expired

    def _question_that_fits(self, now: float) -> Question | None:
        """The oldest question, when no frame waits and its expected answer time ends
        before the next expected frame (always, while the camera's period is unknown or
        the camera is overdue by half a period)."""
        if not self.inbox.questions or self.inbox.latest() is None or \
                self.inbox.frame_pending():
            return None
        period, last = self.inbox.period_s(), self.inbox.last_arrival()
        if period is not None and last is not None and now < last + 1.5 * period:
            if now + (self.answer_time.value or 0.0) > last + period:
                return None
        return self.inbox.questions.popleft()

    # ------------------------------------------------------------------ frames
    def _run_frame(self, job: FrameJob) -> None:
        """schedule -> plan (one outcome) -> publish (once); detection after the Path."""
        config = job.settings.config
        timeout = config.plan_timeout_s
        running = Running(PLAN, job, job.frame.received + timeout if timeout > 0 else None,
                          Ticket())
        self._set_running(running)
        if running.deadline is not None and time.monotonic() >= running.deadline:
            outcome = self.planning.timed_out(job, cancelled=False)     # never started
        elif "planning" in config.tasks:
            start = time.monotonic()
            outcome = self.planning.plan(job, running.cancel)
            if outcome.parsed:
                self.plan_time.add(time.monotonic() - start)
        else:
            outcome = self.planning.refusal(job)
            if outcome is None:                  # no planning task: markers only
                if running.ticket.claim():
                    self._detect_and_mark(job, [status_marker(
                        config.output_frame, job.frame.header.stamp, "no planning task",
                        True)])
                return
        if not running.ticket.claim():           # the deadline or the watchdog answered it
            return
        if outcome.refused:
            self._last_refusal = outcome.message
        elif outcome.source == MODEL:            # the next fallback may re-time it
            self.planning.last_plan.remember(outcome.plan)
        markers = self.outputs.publish_plan(outcome)
        if not outcome.refused:
            self._detect_and_mark(job, markers)

    def _detect_and_mark(self, job: FrameJob, markers: list) -> None:
        """The frame's detections (if a task; cancelled by the next frame), then its
        markers."""
        detections = None
        if "detection" in job.settings.config.tasks:
            running = Running(DETECT, job)
            self._set_running(running)
            detections, failure, message = self.planning.detect(job, running.cancel)
            if failure:
                self.outputs.reporter.problem(
                    WARN if failure == "detections_cancelled" else ERROR, failure, message)
        self.outputs.publish_markers(job, markers, detections)

    def publish_fallback(self, outcome: PlanOutcome) -> None:
        """A fallback outcome published by the deadline or the watchdog (claimed first)."""
        markers = self.outputs.publish_plan(outcome)
        self.outputs.publish_markers(outcome.job, markers, None)

    # ------------------------------------------------------------------ questions
    def _run_question(self, job: QuestionJob) -> None:
        running = Running(QUESTION, job)
        self._set_running(running)
        start = time.monotonic()
        outcome: AnswerOutcome = self.planning.answer(job, running.cancel)
        if not outcome.cancelled and outcome.counter == "questions_answered":
            self.answer_time.add(time.monotonic() - start)
        self.outputs.publish_answer(outcome)

    def _refuse(self, question: str, settings, kind: str, why: str) -> None:
        """Refuse a queued question: counted, reported, an empty answer."""
        echo = settings.config.max_echo_chars
        self.outputs.publish_answer(AnswerOutcome(
            "", "questions_refused", WARN, kind, f"question {clip(question, echo)} refused: "
                                                 f"{why}"))

    def refuse_dropped(self, question: Question) -> None:
        """The oldest question, pushed out of a full queue (called by the node)."""
        self._refuse(question.text, question.settings, "questions_dropped",
                     "the question queue was full (newer questions keep their place)")

    # ------------------------------------------------------------------ deadlines
    def _supervise(self) -> None:
        """Publishes a frame's fallback at its deadline and cancels what must give way."""
        while not self._stop.is_set():
            with self.inbox.cond:
                expired, waited = self._due(time.monotonic())
                if expired is None and waited is None:
                    self.inbox.cond.wait(self._until_due(time.monotonic()))
            if waited is not None:               # its deadline passed while the lane was busy
                self.publish_fallback(self.planning.timed_out(waited, cancelled=False))
            if expired is not None:
                if expired.ticket.claim():           # the fallback first, then the cancel
                    self.publish_fallback(self.planning.timed_out(expired.job))
                expired.cancel.set()

    def _due(self, now: float) -> tuple[Running | None, FrameJob | None]:
        """(`cond` held) The running plan whose deadline just passed, and a waiting frame
        past its own (taken); cancels a running detection or question a frame waits for."""
        running, expired = self.running, None
        if running is not None and running.kind != PLAN and \
                self.inbox.ready_frame(now, take=False):
            running.cancel.set()                     # a frame is ready: it goes first
        if running is not None and running.deadline is not None and \
                now >= running.deadline and not running.expired:
            running.expired, expired = True, running
        deadline = self.inbox.pending_deadline()
        waited = self.inbox.ready_frame(now, force=True) if deadline is not None and \
            now >= deadline else None
        return expired, waited

    def _until_due(self, now: float) -> float:
        """(`cond` held) Seconds until the next deadline or sync wait ends (at most 0.5)."""
        running, wake = self.running, [now + 0.5]
        if running is not None and running.deadline is not None and not running.expired:
            wake.append(running.deadline)
        for at in (self.inbox.sync_ends(), self.inbox.pending_deadline()):
            if at is not None and at > now:
                wake.append(at)
        return max(0.001, min(wake) - now)

    # ------------------------------------------------------------------ watchdog
    def watchdog(self, gap_s: float) -> bool:
        """When no Path went out for `gap_s` (0: never) while frames arrive: a fallback Path
        (`path_gaps`, ERROR naming the cause) for the frame in hand: the one being planned
        (its decode cancelled), else the waiting one, else the newest. True if it fired."""
        now = time.monotonic()
        last_path = self.outputs.last_path_at or self.started
        if gap_s <= 0 or now - last_path < gap_s:
            return False
        with self.inbox.cond:
            arrival, running = self.inbox.last_arrival(), self.running
            if arrival is None or now - arrival > gap_s:
                return False                     # no frames: silence is the camera's
            if running is not None and running.kind == PLAN:
                running.cancel.set()
                job, ticket = running.job, running.ticket
                cause = (f"the model has been planning frame {job.frame.stamp:.3f} for "
                         f"{now - running.started:.1f} s")
            else:
                job, ticket = self.inbox.ready_frame(now, force=True), Ticket()
                if job is not None:
                    cause = (f"frame {job.frame.stamp:.3f} waited "
                             f"{now - job.frame.received:.1f} s for the model "
                             f"({running.kind if running else 'idle'})")
                elif self._last_settings is not None:
                    job = self.inbox.latest_frame(self._last_settings)
                    cause = ("frames arrive but none was planned: "
                             f"{self._last_refusal or 'none reached the model'}")
        if job is None or not ticket.claim():
            return False
        self.publish_fallback(self.planning.fallback(
            job, "path_gaps", f"no Path for {now - last_path:.1f} s while frames arrive "
                              f"(max_path_gap_s {gap_s:g}): {cause}; fallback published",
            ERROR))
        return True
