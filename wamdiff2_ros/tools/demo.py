"""``wamdiff2 demo``: the planner node, live, on the bundled sample bag.

Starts `planner_node` (bundled model and params file) on a ROS_DOMAIN_ID of its own,
replays the sample bag into it through DDS at recorded timing, records what it publishes
into a bag, then matches every output to its input frame by stamp and reports per-frame
latency (frame published -> path received), overlay PNGs and the open-loop metrics of the
plans against the bag's ground truth.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wamdiff2_core.tasks import format_waypoints
from wamdiff2_core.types import bundled_checkpoint_path
from wamdiff2_ros.tools.bag_eval import FrameScorer, latency_summary
from wamdiff2_ros.tools.bag_frames import BagFrame, FrameTopics, camera_document, read_frames
from wamdiff2_ros.tools.bag_io import (BagError, BagReader, BagWriter, header_stamp_ns,
                                       publish_atomically, remove_staged, staged_path)
from wamdiff2_ros.tools.bag_layout import NODE_NAME, SIM_TOPICS, OutputTopics, node_input_remaps
from wamdiff2_ros.tools.bag_overlay import CameraModel, draw_overlay, write_png
from wamdiff2_ros.tools.bag_predict import FALLBACK_PRESET
from wamdiff2_ros.tools.bag_replay import ReplayConfig, make_player, progress_printer
from wamdiff2_ros.tools.demo_graph import (DemoError, NodeProcess, OutputRecorder,
                                           diagnostics_values, node_state)
from wamdiff2_ros.tools.demo_output import frame_file, replace_previous

SAMPLE_BAG = Path(__file__).resolve().parents[1] / "assets" / "sample.mcap"
# Decode settings that keep the untrained fallback preset at a fraction of a second a frame
# (unconstrained: a constrained plan needs 80 tokens).
FALLBACK_DECODE = {"decode.max_new_tokens": 32, "decode.steps_per_block": 4,
                   "decode.constrained": False}


@dataclass(frozen=True)
class DemoConfig:
    """One demo run."""

    out: Path = Path("runs/demo")
    bag: Path = SAMPLE_BAG
    checkpoint: str | None = None          # None: the bundled model
    overrides: dict = field(default_factory=dict)   # extra node parameters
    rate: float = 1.0
    compressed: bool = False               # replay the JPEG topic (image_transport compressed)
    threads: int | None = None             # the node's torch threads (OMP_NUM_THREADS)
    domain_id: int | None = None           # None: one derived from this process id
    startup_timeout_s: float = 120.0
    drain_timeout_s: float = 60.0          # at most, after the last frame, for its answer
    verbose: bool = True


@dataclass
class FrameOutcome:
    """What happened to one replayed camera frame."""

    frame: BagFrame
    published_at: float | None = None      # monotonic
    path_at: float | None = None
    markers_at: float | None = None
    path_waypoints: np.ndarray | None = None
    source: str | None = None              # ~/output/status: model, last_plan or stop

    @property
    def waypoints(self) -> np.ndarray | None:
        """The model's own plan (a fallback Path is not the model's answer)."""
        return self.path_waypoints if self.source == "model" else None

    @property
    def status(self) -> str:
        if self.published_at is None:
            return "not sent"
        if self.waypoints is not None:
            return "planned"
        return "no plan" if self.markers_at is not None else "dropped"

    @property
    def latency_ms(self) -> float | None:
        answered = self.path_at or self.markers_at
        if answered is None or self.published_at is None:
            return None
        return (answered - self.published_at) * 1e3


def default_domain_id() -> int:
    """A ROS_DOMAIN_ID in 1..101 of this process (the demo sees only its own node)."""
    return 1 + os.getpid() % 101


def _say(cfg: DemoConfig, text: str) -> None:
    if cfg.verbose:
        print(text, file=sys.stderr, flush=True)


def node_overrides(cfg: DemoConfig) -> dict:
    """Parameters on top of the params file: the bag's stamps are old (no age limit), every
    plan is the model's however slow the machine (no plan timeout), the path stays in
    base_link (scored against the ground truth there)."""

    out = {"max_input_age_s": 0.0, "plan_timeout_s": 0.0, "path_in_odom": False,
           "image_transport": "compressed" if cfg.compressed else "raw"}
    if cfg.checkpoint is not None:
        out["checkpoint"] = cfg.checkpoint
    elif bundled_checkpoint_path() is None:
        print(f"warning: this checkout has no bundled model; the demo uses the untrained "
              f"'{FALLBACK_PRESET}' preset (every answer will fail to parse)", file=sys.stderr)
        out.update({"checkpoint": FALLBACK_PRESET, **FALLBACK_DECODE})
    out.update(cfg.overrides)
    return out


def run_demo(cfg: DemoConfig) -> dict:
    """Run the demo; returns the report (also written to OUT/report.json)."""
    tic = time.perf_counter()
    out_bag, report_path, frames_dir = (cfg.out / "outputs.mcap", cfg.out / "report.json",
                                        cfg.out / "frames")
    domain = cfg.domain_id if cfg.domain_id is not None else default_domain_id()
    with BagReader(cfg.bag) as bag:
        topics = FrameTopics.resolve(bag, SIM_TOPICS.compressed if cfg.compressed else None)
        bag.check_stamps(list(bag.topics))
        replayed = [topics.camera, topics.odometry, topics.command]
        if None in replayed:
            raise BagError(f"{cfg.bag} lacks odometry or a command topic "
                           f"({SIM_TOPICS.odometry}, {SIM_TOPICS.command})")
        frames = list(read_frames(bag, topics, check_stamps=False))
        camera_doc, camera_info = camera_document(bag, topics)
        if replace_previous(cfg.out, [f.index for f in frames]):
            _say(cfg, f"[demo] replaced the previous demo run's output in {cfg.out}")
        outcomes = {f.stamp_ns: FrameOutcome(f) for f in frames}
        overrides = node_overrides(cfg)
        _say(cfg, f"[demo] starting planner_node on ROS_DOMAIN_ID={domain} "
                  f"({', '.join(f'{k}={v}' for k, v in overrides.items())})")
        env = {"OMP_NUM_THREADS": str(cfg.threads)} if cfg.threads else None
        node = NodeProcess(domain, cfg.out / "planner_node.log", overrides, env=env)
        try:
            live = _run_live(cfg, bag, topics, replayed, domain, node, outcomes, out_bag)
        finally:
            code = node.stop()
        _say(cfg, f"[demo] planner_node stopped (exit code {code})")
    report = _finish(cfg, frames, outcomes, live, camera_doc, camera_info, frames_dir,
                     report_path, out_bag)
    report["seconds"] = round(time.perf_counter() - tic, 1)
    staged = staged_path(report_path)
    try:
        staged.write_text(json.dumps(report, indent=1) + "\n")
        publish_atomically(staged, report_path)
    finally:
        remove_staged(staged)
    return report


class FrameMatcher:
    """Ties the node's outputs to the replayed frames by stamp (outputs carry the image's)."""

    def __init__(self, outcomes: dict[int, FrameOutcome], camera_topic: str):
        self.outcomes, self.camera_topic = outcomes, camera_topic
        self.topics = OutputTopics(NODE_NAME)
        self._seen = 0

    def on_publish(self, topic: str, log_ns: int, raw: bytes, at: float) -> None:
        """BagPlayer hook: when each camera frame went out."""
        if topic == self.camera_topic and header_stamp_ns(raw) in self.outcomes:
            self.outcomes[header_stamp_ns(raw)].published_at = at

    def _on_output(self, item) -> None:
        from nav_msgs.msg import Path as PathMsg
        from rclpy.serialization import deserialize_message
        from visualization_msgs.msg import MarkerArray

        if item.topic == self.topics.path:
            outcome = self.outcomes.get(header_stamp_ns(item.raw))
            if outcome is not None and outcome.path_at is None:
                msg = deserialize_message(item.raw, PathMsg)
                outcome.path_at = item.at
                outcome.path_waypoints = np.array([[p.pose.position.x, p.pose.position.y]
                                                   for p in msg.poses], dtype=np.float64)
        elif item.topic == self.topics.status:
            from diagnostic_msgs.msg import DiagnosticArray

            outcome = self.outcomes.get(header_stamp_ns(item.raw))
            msg = deserialize_message(item.raw, DiagnosticArray)
            if outcome is not None and msg.status:
                values = {kv.key: kv.value for kv in msg.status[0].values}
                outcome.source = values.get("source")
        elif item.topic == self.topics.markers:
            for marker in deserialize_message(item.raw, MarkerArray).markers:
                stamp = marker.header.stamp.sec * 1_000_000_000 + marker.header.stamp.nanosec
                outcome = self.outcomes.get(stamp)
                if marker.ns == "wamdiff2/status" and outcome and outcome.markers_at is None:
                    outcome.markers_at = item.at

    def update(self, recorder: OutputRecorder) -> bool:
        """Take in what arrived since the last call; True when every sent frame is answered
        in full. A frame's markers are its last output (the node publishes the Path, then
        detects, then the markers), so a Path alone is not the end of its answer."""
        items = recorder.messages()
        for item in items[self._seen:]:
            self._on_output(item)
        self._seen = len(items)
        return all(o.markers_at for o in self.outcomes.values() if o.published_at is not None)

    def drain(self, recorder: OutputRecorder, timeout_s: float) -> str:
        """Wait until every sent frame is answered ("answered"), or the node has nothing left
        to do ("idle": its /diagnostics count every received frame as planned or dropped), or
        at most `timeout_s` ("timeout"). Returns which ended the wait."""
        sent = sum(o.published_at is not None for o in self.outcomes.values())
        deadline = time.monotonic() + timeout_s
        idle_since = None
        while time.monotonic() < deadline:
            if recorder.wait(lambda: self.update(recorder), 0.2):
                return "answered"
            if node_idle(recorder, sent, sum(o.path_at is not None
                                             for o in self.outcomes.values())):
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 1.0:     # its last messages are out
                    return "idle"
            else:
                idle_since = None
        return "timeout"


def node_counters(recorder: OutputRecorder) -> dict[str, int] | None:
    """The node's counters in its latest /diagnostics (None before the first)."""
    diagnostics = recorder.messages("/diagnostics")
    if not diagnostics:
        return None
    values = diagnostics_values(diagnostics[-1].raw)
    return {k: int(values.get(k, "0") or 0) for k in ("frames_received", "frames_planned",
                                                        "dropped_frames", "stale_frames",
                                                        "paths_published")}


def node_idle(recorder: OutputRecorder, sent: int, paths_arrived: int | None = None) -> bool:
    """The node's latest counters: it received `sent` frames and finished or dropped each;
    given `paths_arrived` (the Paths the caller holds), also that every Path they count as
    published has arrived. Topics are delivered apart: a lost packet of a Path is resent
    seconds later, after the counters that report its frame planned."""
    count = node_counters(recorder)
    if count is None:
        return False
    return count["frames_received"] >= sent and (
        count["frames_planned"] + count["dropped_frames"] + count["stale_frames"]
        >= count["frames_received"]) and (
        paths_arrived is None or paths_arrived >= count["paths_published"])


def _wait_active(cfg: DemoConfig, node: NodeProcess, recorder: OutputRecorder) -> None:
    """Until the node reports state `active` on /diagnostics; DemoError if it exits or
    takes longer than the start-up timeout."""
    def ready() -> bool:
        if not node.alive():
            raise DemoError(f"planner_node exited with code {node.proc.returncode}:\n"
                            f"{node.log_tail()}")
        return any(node_state(r.raw) == "active" for r in recorder.messages("/diagnostics"))

    if not recorder.wait(ready, cfg.startup_timeout_s):
        raise DemoError(f"planner_node was not active after {cfg.startup_timeout_s:g} s:\n"
                        f"{node.log_tail()}")


def _run_live(cfg: DemoConfig, bag: BagReader, topics: FrameTopics, replayed: list[str],
              domain: int, node: NodeProcess, outcomes: dict, out_bag: Path) -> dict:
    """Wait for the node, replay into it, wait for its last answers, record its outputs;
    the node's last diagnostics."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    context = Context()
    rclpy.init(args=[], context=context, domain_id=domain)
    client = rclpy.create_node(f"wamdiff2_demo_{os.getpid()}", context=context)
    recorder = OutputRecorder(client, SingleThreadedExecutor(context=context))
    matcher = FrameMatcher(outcomes, topics.camera)
    try:
        _say(cfg, "[demo] waiting for the node to load the model and warm up ...")
        tic = time.monotonic()
        _wait_active(cfg, node, recorder)
        _say(cfg, f"[demo] node active after {time.monotonic() - tic:.1f} s")
        remaps = {k: v for k, v in node_input_remaps(NODE_NAME, SIM_TOPICS,
                                                      cfg.compressed).items()
                  if k in replayed}
        # the command latched, as a navigation stack sends it: the node's latched-command
        # subscription then matches it too, with no incompatible-QoS warning (docs/ros.md)
        player = make_player(client, bag, ReplayConfig(bag.path, rate=cfg.rate,
                                                        topics=tuple(replayed), remaps=remaps,
                                                        latched=(topics.command,)),
                             matcher.on_publish)
        missing = player.wait_for_subscribers(replayed, 30.0)
        if missing:
            raise DemoError(f"planner_node does not subscribe to "
                            f"{', '.join(player.published_name(t) for t in missing)}")
        _say(cfg, f"[demo] replaying {len(outcomes)} frames of {bag.path.name} at "
                  f"x{cfg.rate:g} into /{NODE_NAME}/input/...")
        show = progress_printer(cfg.rate) if cfg.verbose else None
        progress = player.play(show, flush=False)      # we stay to hear the answers
        if show is not None and show.tty:
            print(file=sys.stderr)
        if progress.interrupted:
            raise KeyboardInterrupt
        matcher.drain(recorder, cfg.drain_timeout_s)
        player.close()
        diagnostics = recorder.messages("/diagnostics")
        _write_outputs(recorder, out_bag, tic)
        return {"diagnostics": diagnostics_values(diagnostics[-1].raw) if diagnostics else {}}
    finally:
        recorder.close()
        client.destroy_node()
        rclpy.try_shutdown(context=context)


def _write_outputs(recorder: OutputRecorder, out_bag: Path, start: float) -> None:
    """Everything recorded, stamped with the wall clock of its arrival (an output bag)."""
    epoch = time.time_ns() - int((time.monotonic() - start) * 1e9)
    with BagWriter(out_bag) as writer:
        for item in recorder.messages():
            writer.write(item.topic, item.msgtype, epoch + int((item.at - start) * 1e9),
                         item.raw)


def _finish(cfg: DemoConfig, frames: list[BagFrame], outcomes: dict, live: dict,
            camera_doc, camera_info, frames_dir: Path, report_path: Path, out_bag: Path
            ) -> dict:
    """Score, draw and print; the report dict."""

    scorer = FrameScorer(("planning",))
    rows = []
    staged = staged_path(frames_dir)
    remove_staged(staged)
    staged.mkdir(parents=True)
    try:
        for frame in frames:
            outcome = outcomes[frame.stamp_ns]
            l2 = None
            if outcome.status in ("planned", "no plan"):
                text = format_waypoints(outcome.waypoints) if outcome.waypoints is not None \
                    else ""
                l2 = scorer.add(frame, {"planning": (text, 0.0)})
            latency = outcome.latency_ms
            rows.append({"index": frame.index, "stamp": round(frame.stamp_s, 3),
                         "t": round((frame.stamp_ns - frames[0].stamp_ns) * 1e-9, 3),
                         "command": frame.command, "status": outcome.status,
                         "latency_ms": None if latency is None else round(latency, 1),
                         "l2_mean": None if l2 is None else round(l2, 3)})
            if frame.rgb is not None:
                height, width = frame.rgb.shape[:2]
                model = CameraModel.from_bag(camera_doc, camera_info, width, height)
                caption = [f"frame {frame.index}  {outcome.status}" +
                           (f"  {latency:.0f} ms" if latency is not None else "") +
                           (f"  L2 {l2:.2f} m" if l2 is not None else ""),
                           f"t+{(frame.stamp_ns - frames[0].stamp_ns) * 1e-9:.2f}s  "
                           f"{frame.command}  "
                           f"v={frame.motion.velocity[0]:.1f} m/s"]
                truth = frame.truth.ego_future if frame.truth else None
                write_png(staged / Path(frame_file(frame.index)).name,
                          draw_overlay(frame.rgb, model, outcome.waypoints, truth, caption,
                                       outcome.status == "planned"))
        publish_atomically(staged, frames_dir)
    finally:
        remove_staged(staged)
    latencies = [r["latency_ms"] for r in rows if r["latency_ms"] is not None]
    counts = {s: sum(r["status"] == s for r in rows)
              for s in ("planned", "no plan", "dropped", "not sent")}
    open_loop = scorer.report({"bag": str(cfg.bag), "source": "planner_node via DDS"})
    report = {"bag": str(cfg.bag), "output_bag": str(out_bag), "frames_dir": str(frames_dir),
              "frames": len(rows), "counts": counts,
              "latency_ms": latency_summary(latencies),
              "node_diagnostics": live["diagnostics"],
              "open_loop": open_loop.to_dict() if open_loop else None, "per_frame": rows}
    if cfg.verbose:
        print(format_table(report), flush=True)
    return report


def format_table(report: dict) -> str:
    """The per-frame lines and the summary the demo prints."""
    lines = [f"{'frame':>5}  {'t (s)':>6}  {'command':<8}  {'status':<8}  "
             f"{'latency ms':>10}  {'L2 m':>6}"]
    for r in report["per_frame"]:
        lat = "-" if r["latency_ms"] is None else f"{r['latency_ms']:.1f}"
        l2 = "-" if r["l2_mean"] is None else f"{r['l2_mean']:.2f}"
        lines.append(f"{r['index']:>5}  {r['t']:>6.2f}  {r['command']:<8}  "
                     f"{r['status']:<8}  {lat:>10}  {l2:>6}")
    lat = report["latency_ms"]
    counts = ", ".join(f"{n} {k}" for k, n in report["counts"].items() if n)
    lines.append(f"frames: {report['frames']} ({counts})")
    if lat["count"]:
        lines.append(f"latency (frame published -> answer received): mean {lat['mean']:.1f} "
                     f"ms, p50 {lat['p50']:.1f}, p90 {lat['p90']:.1f}, max {lat['max']:.1f}")
    diag = report["node_diagnostics"]
    if "planner_ms.p50" in diag:
        lines.append(f"node: planner {diag['planner_ms.p50']} ms p50, "
                     f"{diag.get('parse_failures', '0')} parse failures, "
                     f"{diag.get('dropped_frames', '0')} dropped frames")
    dropped = report["counts"].get("dropped", 0)
    if dropped and lat["p50"]:
        lines.append(f"{dropped} frame{'s' if dropped > 1 else ''} dropped: the node keeps only "
                     f"the newest frame while it "
                     f"plans, and it answers in ~{lat['p50']:.0f} ms; --rate "
                     f"{_slow_rate(lat['p50'], report):g} gives it time for every frame")
    ol = (report.get("open_loop") or {}).get("planning")
    if ol:
        def fmt(v):
            return "n/a" if v is None else f"{v:.3f}"
        lines.append(f"open loop: L2 avg 1/2/3 s {fmt(ol['l2_avg_1s'])} / "
                     f"{fmt(ol['l2_avg_2s'])} / {fmt(ol['l2_avg_3s'])} m, collision rate "
                     f"{fmt(ol['collision_rate'])}, parse failures {ol['num_parse_failures']}"
                     f"/{ol['num_records']}")
    lines.append(f"wrote {report['output_bag']}, {report['frames_dir']}/, report.json")
    return "\n".join(lines)


def _slow_rate(latency_ms: float, report: dict) -> float:
    """A replay rate at which frames come no faster than the node answers them."""
    stamps = [r["t"] for r in report["per_frame"]]
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    gap_s = min(gaps) if gaps else 0.5
    for rate in (0.5, 0.25, 0.2, 0.1, 0.05):
        if gap_s / rate * 1e3 >= 1.5 * latency_ms:
            return rate
    return 0.05
