"""`bench node --question-rate`: a question publisher beside the camera, and what each phase
of a run gave its frames.

A run with a question load has two phases on the same node and the same frames: first no
questions, then a question every 1/rate seconds. Each phase reports Paths per frame (every
Path the node published, counted by its frame's stamp, with the source its ~/output/status
gives: model or a named fallback), frames with no Path or several, and frame -> Path latency
(the trigger image's publish to its frame's first Path, whatever the source) p50 / p99 /
max; the load phase also counts the questions sent, answered and refused (an empty answer).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

QUESTION = "What is the vehicle ahead of us doing?"
NO_LOAD = "no questions"


class QuestionLoad:
    """Publishes QUESTION at `rate_hz` (reliable, as the node's question subscription) on a
    thread of its own between `start` and `stop`."""

    def __init__(self, node, topic: str, rate_hz: float):
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        self._msg = String(data=QUESTION)
        self.publisher = node.create_publisher(String, topic, QoSProfile(
            depth=10, reliability=ReliabilityPolicy.RELIABLE))
        self.period_s = 1.0 / rate_hz
        self.sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="bench-questions", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.publisher.publish(self._msg)
            self.sent += 1
            next_at += self.period_s


@dataclass
class Phase:
    """One phase's frames (by stamp) and what came back for them."""

    name: str
    sent_at: dict[int, float] = field(default_factory=dict)      # stamp ns -> perf_counter
    first_path_at: dict[int, float] = field(default_factory=dict)
    path_counts: dict[int, int] = field(default_factory=dict)    # every Path, by stamp
    sources: dict[int, list[str]] = field(default_factory=dict)  # ~/output/status, by stamp
    questions: int = 0
    answers: int = 0
    refusals: int = 0

    def summary(self) -> dict:
        frames = len(self.sent_at)
        counts = [self.path_counts.get(s, 0) for s in self.sent_at]
        latency = [(self.first_path_at[s] - t) * 1e3 for s, t in self.sent_at.items()
                   if s in self.first_path_at]
        sources = Counter(src for s in self.sent_at for src in self.sources.get(s, []))
        out = {"frames": frames,
               "paths_per_frame": round(sum(counts) / frames, 3) if frames else None,
               "frames_without_path": sum(c == 0 for c in counts),
               "frames_with_several_paths": sum(c > 1 for c in counts),
               "path_sources": dict(sorted(sources.items())),
               "frame_to_path_ms": _percentiles(latency)}
        if self.name != NO_LOAD:
            out["questions"] = {"sent": self.questions, "answered": self.answers,
                                "refused": self.refusals}
        return out


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    return {"p50": round(float(np.percentile(values, 50)), 1),
            "p99": round(float(np.percentile(values, 99)), 1),
            "max": round(float(max(values)), 1), "n": len(values)}


def p99_ratio(phases: list[Phase]) -> float | None:
    """The load phase's frame -> Path p99 over the no-question phase's (None without both)."""
    if len(phases) < 2:
        return None
    base, load = (p.summary()["frame_to_path_ms"]["p99"] for p in phases[:2])
    return round(load / base, 2) if base and load is not None else None


def phase_table(phases: list[Phase]) -> str:
    """The per-phase lines `bench node` prints."""
    lines = [f"{'frame -> Path (first, any source)':34s}{'p50 ms':>9s}{'p99 ms':>9s}"
             f"{'max ms':>9s}{'Paths/frame':>13s}  sources"]
    for phase in phases:
        s = phase.summary()
        lat = s["frame_to_path_ms"]
        cells = "".join(f"{'-' if lat[k] is None else format(lat[k], '.1f'):>9s}"
                        for k in ("p50", "p99", "max"))
        per = "-" if s["paths_per_frame"] is None else f"{s['paths_per_frame']:.2f}"
        sources = ", ".join(f"{k} {n}" for k, n in s["path_sources"].items()) or "none"
        lines.append(f"  {phase.name:32s}{cells}{per:>13s}  {sources}")
        if s["frames_without_path"] or s["frames_with_several_paths"]:
            lines.append(f"    {s['frames_without_path']} frame(s) without a Path, "
                         f"{s['frames_with_several_paths']} with several")
        if "questions" in s:
            q = s["questions"]
            pending = q["sent"] - q["answered"] - q["refused"]
            lines.append(f"    questions: {q['sent']} sent, {q['answered']} answered, "
                         f"{q['refused']} refused (empty answer)"
                         + (f", {pending} not answered by the phase's end" if pending else ""))
    ratio = p99_ratio(phases)
    if ratio is not None:
        lines.append(f"p99 with questions / p99 without: {ratio:.2f}x")
    return "\n".join(lines)
