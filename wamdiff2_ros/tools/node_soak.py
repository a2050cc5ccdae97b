"""`wamdiff2 bench soak`: the node under a steady camera for minutes, memory and output rate.

Starts `planner_node` with the params file (the bundled model unless told otherwise) and
publishes simulator frames at a fixed rate with odometry at the frames' own speed, as a
vehicle would, for `minutes`. Records every Path (matched to its frame by stamp) with its
source from `~/output/status`, and the node's resident memory every few seconds. Reports
RSS at the start (the first frame), the end and the peak, Paths per minute (the model's own
and fallbacks), image -> Path latency p50/p95 (publish to arrival), and the node's own
counters from its last /diagnostics.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wamdiff2_ros.tools.node_bench import BenchConfig, running_node, wait_for


@dataclass(frozen=True)
class SoakConfig:
    bench: BenchConfig                 # model, decoding, size, params file, domain
    minutes: float = 10.0
    rate_hz: float = 15.0
    frames: int = 60                   # distinct simulator frames, cycled
    rss_every_s: float = 5.0
    progress_every_s: float = 60.0


@dataclass
class SoakResult:
    sent: int = 0
    elapsed_s: float = 0.0
    rss_mb: list[tuple[float, float]] = field(default_factory=list)    # (elapsed s, MB)
    latency_ms: list[float] = field(default_factory=list)              # model Paths
    sources: dict[str, int] = field(default_factory=dict)
    diagnostics: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict:
        minutes = self.elapsed_s / 60.0 if self.elapsed_s else math.nan
        lat = self.latency_ms
        mem = [mb for _, mb in self.rss_mb]
        return {
            "frames_sent": self.sent, "elapsed_s": round(self.elapsed_s, 1),
            "rss_mb": {"start": mem[0] if mem else None, "end": mem[-1] if mem else None,
                       "max": max(mem) if mem else None},
            "paths_per_min": {s: round(n / minutes, 1) for s, n in self.sources.items()},
            "latency_ms": {"p50": float(np.percentile(lat, 50)) if lat else None,
                           "p95": float(np.percentile(lat, 95)) if lat else None,
                           "n": len(lat)},
            "node": {**{k: self.diagnostics.get(k) for k in (
                "frames_received", "frames_planned", "paths_published", "fallback_paths",
                "dropped_frames", "stale_frames", "parse_failures", "model_errors",
                "plan_timeouts", "planner_ms.p50", "planner_ms.p95")},
                # and every other counter that counted something: why the fallbacks were
                **{k: v for k, v in self.diagnostics.items() if v.isdigit() and v != "0"}},
        }

    def lines(self) -> str:
        s = self.summary()
        rss, lat, per_min = s["rss_mb"], s["latency_ms"], s["paths_per_min"]
        fmt = (lambda v: "-" if v is None else f"{v:.0f}")
        return "\n".join([
            f"frames sent: {s['frames_sent']} in {s['elapsed_s']:.0f} s",
            f"node RSS: start {fmt(rss['start'])} MB, end {fmt(rss['end'])} MB, max "
            f"{fmt(rss['max'])} MB",
            "paths/min: " + ", ".join(f"{k} {v:g}" for k, v in sorted(per_min.items())),
            f"image -> Path (model plans): p50 {fmt(lat['p50'])} ms, p95 {fmt(lat['p95'])} ms"
            f" ({lat['n']} paths)",
            "node counters: " + ", ".join(f"{k} {v}" for k, v in s["node"].items()
                                          if v is not None)])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _sim_frames(count: int, width: int, height: int) -> list[tuple[np.ndarray, float]]:
    """(RGB frame, forward speed m/s) of consecutive simulator steps."""
    from wamdiff2_core.sim.camera import CameraConfig
    from wamdiff2_core.sim.renderer import CameraRenderer
    from wamdiff2_core.sim.world import World

    world = World("highway", seed=0)
    out = []
    with CameraRenderer(CameraConfig(width=width, height=height), world.lanes) as renderer:
        for _ in range(count):
            rgb = renderer.render(world.ego_state(), world.others(150.0)).rgb
            out.append((rgb, float(world.ego_motion()[0][0])))
            world.step()
    return out


def run_soak(cfg: SoakConfig, say=print) -> SoakResult:
    """Run the soak; the measurements (progress lines go to `say`)."""
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    b = cfg.bench
    frames = _sim_frames(cfg.frames, b.width, b.height)
    last_diag: dict[str, str] = {}

    def on_diag(msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "frames_planned" in values:
                last_diag.clear()
                last_diag.update(values)
    result, sent_at = SoakResult(), {}
    with running_node(b) as (proc, log, client):
        client.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag,
                                        QoSProfile(depth=10,
                                                   reliability=ReliabilityPolicy.RELIABLE))
        wait_for(lambda: client.pub.get_subscription_count() > 0, b.timeout_s,
                 "the node to load, warm up and subscribe", proc, log)
        images = []
        for rgb, _ in frames:
            msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8",
                        step=rgb.shape[1] * 3)
            msg.data, msg.header.frame_id = rgb.tobytes(), "camera_front"
            images.append(msg)
        odom = Odometry()
        odom.header.frame_id, odom.child_frame_id = "odom", "base_link"
        odom.pose.pose.orientation.w = 1.0
        total = int(cfg.minutes * 60 * cfg.rate_hz)
        start = time.monotonic()
        next_rss, next_say = 0.0, cfg.progress_every_s
        for i in range(total):
            time.sleep(max(0.0, start + i / cfg.rate_hz - time.monotonic()))
            now_ns = client.node.get_clock().now().nanoseconds
            stamp = divmod(now_ns, 10**9)
            odom.header.stamp.sec, odom.header.stamp.nanosec = stamp
            odom.twist.twist.linear.x = frames[i % len(frames)][1]
            client.odometry_pub.publish(odom)
            msg = images[i % len(images)]
            msg.header.stamp.sec, msg.header.stamp.nanosec = stamp
            sent_at[now_ns] = time.perf_counter()
            client.pub.publish(msg)
            result.sent += 1
            elapsed = time.monotonic() - start
            if elapsed >= next_rss:
                result.rss_mb.append((elapsed, _rss_mb(proc.pid)))
                next_rss += cfg.rss_every_s
            if elapsed >= next_say:
                say(f"[soak] {elapsed / 60:.1f} min: {result.sent} frames sent, node RSS "
                    f"{result.rss_mb[-1][1]:.0f} MB, {len(client.arrived['path'])} paths")
                next_say += cfg.progress_every_s
            if proc.poll() is not None:
                raise RuntimeError(f"planner_node exited with {proc.returncode} during the "
                                   "soak")
        result.elapsed_s = time.monotonic() - start
        result.rss_mb.append((result.elapsed_s, _rss_mb(proc.pid)))
        time.sleep(5.0)                                   # the last plans and a summary
        for stamp_ns, sent in sent_at.items():
            source = client.source(stamp_ns)
            if source is None:
                continue
            result.sources[source] = result.sources.get(source, 0) + 1
            arrived = client.arrival("path", stamp_ns)
            if source == "model" and arrived is not None:
                result.latency_ms.append((arrived - sent) * 1e3)
        result.diagnostics = dict(last_diag)
    return result
