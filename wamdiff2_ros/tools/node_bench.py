"""`wamdiff2 bench node`: image -> Path latency through the node next to the bare planner.

Both numbers come from one run, on the same simulator frames and the same decoding
settings, frame by frame: `Planner.plan` in this process, then the `planner_node` executable
(started with the params file) fed that frame over DDS, timed from just before `publish` to
the arrival of the Path stamped with that frame. Frames go one at a time, so the numbers
are latency, not queueing. For a frame whose answer does not parse the node publishes its
fallback Path (`~/output/status` says so): those frames are timed to the node's markers
and reported separately; only the model's own Paths count as image -> Path. The node runs
without requiring odometry and without a plan timeout (the bare planner has neither).

With a camera rig (`--cameras front,left`) every frame is the rig's images (published on
`~/input/<name>/image` with one stamp, the others `side_delay_ms` after the trigger's) and
the prompt holds one image per camera. With `question_rate_hz` the same frames go through
the node a second time under a question load (node_bench_load.py). A checkpoint trained with other cameras is timed as a copy of its weights that
names the rig's cameras (its answers then mean nothing; their cost is what is measured).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wamdiff2_core.decoding.config import DEFAULT_BACKEND
from wamdiff2_core.tasks import AnswerParseError
from wamdiff2_core.types import Observation
from wamdiff2_ros.node import params
from wamdiff2_ros.tools.demo_graph import dds_profile_env, find_params_file
from wamdiff2_ros.tools.node_bench_client import NODE, NodeClient
from wamdiff2_ros.tools.node_bench_load import (NO_LOAD, Phase, QuestionLoad, p99_ratio,
                                                phase_table)


@dataclass(frozen=True)
class BenchConfig:
    checkpoint: str | None           # None: the bundled model
    decode: Any                      # DecodeConfig, shared by both measurements
    backend: str = DEFAULT_BACKEND
    device: str = "cpu"
    dtype: str | None = None
    frames: int = 20
    warmup_frames: int = 2
    width: int = 640
    height: int = 360
    domain_id: int = 0               # 0: derived from the process id
    params_file: Path | None = None  # None: the package's config/wamdiff2.yaml
    timeout_s: float = 300.0
    fields: dict = field(default_factory=dict)   # diffusion fields given by the user
    overrides: dict = field(default_factory=dict)   # more node parameters (name -> value)
    as_shipped: bool = False         # keep the params file's odometry and timeout limits
    cameras: str | None = None       # a camera rig (file or names: sim.camera.load_rig)
    question_rate_hz: float = 0.0    # > 0: a second phase with questions at this rate
    side_delay_ms: float = 5.0       # a rig's other images this long after the trigger's


@dataclass
class BenchResult:
    planner_ms: list[float] = field(default_factory=list)
    node_path_ms: list[float] = field(default_factory=list)       # frames that gave a Path
    node_result_ms: list[float] = field(default_factory=list)     # every frame, to markers
    planner_parse_failures: int = 0
    frames: int = 0
    decode: str = ""             # what both decode with (resolved: the checkpoint's rule too)
    cameras: tuple[str, ...] = ("front",)
    prompt_tokens: int = 0       # the planning prompt's length with every camera's image
    renamed: bool = False        # the weights were trained with other cameras (timing only)
    phases: list = field(default_factory=list)   # node_bench_load.Phase: frames' Paths

    def summary(self) -> dict:
        def pct(xs):
            return {"p50": float(np.percentile(xs, 50)), "p95": float(np.percentile(xs, 95)),
                    "n": len(xs)} if xs else {"p50": None, "p95": None, "n": 0}
        return {"frames": self.frames, "cameras": list(self.cameras),
                "prompt_tokens": self.prompt_tokens, "weights_for_other_cameras": self.renamed,
                "planner_ms": pct(self.planner_ms),
                "node_image_to_path_ms": pct(self.node_path_ms),
                "node_image_to_markers_ms": pct(self.node_result_ms),
                "planner_parse_failures": self.planner_parse_failures,
                "phases": {p.name: p.summary() for p in self.phases},
                "p99_with_questions_over_without": p99_ratio(self.phases)}

    def table(self) -> str:
        s = self.summary()
        rows = [("bare Planner.plan()", s["planner_ms"]),
                ("node: image -> Path", s["node_image_to_path_ms"]),
                ("node: image -> markers", s["node_image_to_markers_ms"])]
        lines = [f"{'':26s}{'p50 ms':>10s}{'p95 ms':>10s}{'frames':>8s}"]
        for name, p in rows:
            if p["n"]:
                lines.append(f"{name:26s}{p['p50']:10.1f}{p['p95']:10.1f}{p['n']:8d}")
            else:
                lines.append(f"{name:26s}{'-':>10s}{'-':>10s}{0:8d}")
        if not s["node_image_to_path_ms"]["n"]:
            lines.append("no Path came from the model (only fallbacks): its answers did not "
                         "parse (an untrained preset?); image -> markers times the same work")
        if self.phases:
            lines.append(phase_table(self.phases))
        return "\n".join(lines)


def bench_frames(count: int, width: int, height: int, cameras: str | None = None
                 ) -> list[list[np.ndarray]]:
    """Frames of a simulated highway episode: per frame, each camera's (H, W, 3) uint8 RGB
    image (the front camera alone, or the rig `cameras`: sim.camera.load_rig)."""
    from wamdiff2_core.sim.camera import CameraConfig, load_rig
    from wamdiff2_core.sim.renderer import CameraRenderer
    from wamdiff2_core.sim.world import World

    camera = CameraConfig(width=width, height=height)
    rig = load_rig(cameras, camera) if cameras else camera
    world = World("highway", seed=0)
    frames = []
    with CameraRenderer(rig, world.lanes) as renderer:
        for _ in range(count):
            frames.append([f.rgb for f in renderer.render_rig(world.ego_state(),
                                                              world.others(150.0))])
            world.step()
    return frames


def rig_checkpoint(cfg: BenchConfig, names: tuple[str, ...], folder: Path
                   ) -> tuple[BenchConfig, bool]:
    """`cfg` with a checkpoint whose cameras are `names`: its own when it was trained with
    them, else a copy of its weights in `folder` that names them (True: renamed)."""
    from dataclasses import replace

    from wamdiff2_core.planner import load_model

    model = load_model(cfg.checkpoint, fields=cfg.fields)
    if model.fields.cameras == names:
        return cfg, False
    model.with_fields(source="bench", cameras=names).save_pretrained(folder)
    return replace(cfg, checkpoint=str(folder)), True


class _BarePlanner:
    """Planner.plan in this process, timed (a malformed answer still costs a full decode)."""

    def __init__(self, cfg: BenchConfig):
        from wamdiff2_core.planner import Planner, PlannerConfig  # torch loads here

        self._observation, self._parse_error = Observation, AnswerParseError
        self.planner = Planner.from_pretrained(
            cfg.checkpoint, PlannerConfig(cfg.decode, backend=cfg.backend),
            device=cfg.device, dtype=cfg.dtype, fields=cfg.fields)
        self.planner.warmup()

    def prompt_tokens(self, images: list[np.ndarray]) -> int:
        """The planning prompt's length in tokens with these images."""
        prompt = self.planner.planning_prompt(self._observation(images=images))
        return self.planner.prompt_length(prompt, [(i.shape[1], i.shape[0]) for i in images])

    def time_plan(self, images: list[np.ndarray]) -> tuple[float, bool]:
        """(milliseconds, whether the answer parsed), planned on a thread of its own.

        The node plans on a worker thread; torch's CPU thread pool behaves differently on
        the main thread (much slower on a loaded machine), so the bare planner gets a
        worker thread too and the difference left is the ROS layer.
        """
        out: list[tuple[float, bool]] = []

        def work() -> None:
            start = time.perf_counter()
            try:
                self.planner.plan(self._observation(images=list(images)))
                parsed = True
            except self._parse_error:
                parsed = False
            out.append(((time.perf_counter() - start) * 1e3, parsed))

        thread = threading.Thread(target=work, name="bench-planner")
        thread.start()
        thread.join()
        return out[0]


def node_command(cfg: BenchConfig) -> list[str]:
    exe = Path(sys.executable).parent / "planner_node"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "wamdiff2_ros.node.planner_node"]
    overrides = {"checkpoint": cfg.checkpoint or "", "device": cfg.device,
                 "dtype": cfg.dtype or "", "backend": cfg.backend,
                 "tasks": "[planning, qa]" if cfg.question_rate_hz else "[planning]",
                 **({} if cfg.as_shipped else {"max_odometry_age_s": 0.0,
                                                "plan_timeout_s": 0.0}),
                 **params.decode_values(cfg.decode),
                 **{f"model.{k}": v for k, v in cfg.fields.items() if k != "block_size"},
                 **cfg.overrides}
    if cfg.cameras:
        names = [camera.name for camera in _rig(cfg).cameras]
        overrides["cameras"] = "[" + ",".join(names) + "]"
    cmd += ["--ros-args", "--params-file", str(cfg.params_file or find_params_file())]
    for name, value in overrides.items():
        cmd += ["-p", f"{name}:={value if value != '' else repr('')}"]
    return cmd


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen, log):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"planner_node exited with {proc.returncode} while waiting "
                               f"for {what}:\n{log.read()[-2000:]}")
        time.sleep(0.002)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextlib.contextmanager
def running_node(cfg: BenchConfig):
    """`planner_node` started with the bench's parameters, and a NodeClient on its domain:
    yields (process, its log file, client); on exit the client closes and the node gets
    SIGINT (killed if it is not gone after 60 s)."""
    domain = cfg.domain_id or 1 + os.getpid() % 101
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(node_command(cfg), env=dict(os.environ, ROS_DOMAIN_ID=str(domain),
                                                        **dds_profile_env()),
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    client = NodeClient(domain, _rig(cfg).names if cfg.cameras else ("front",))
    try:
        yield proc, log, client
    finally:
        client.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run_bench(cfg: BenchConfig) -> BenchResult:
    """Time each frame through the bare planner, then through the node, frame by frame.

    Interleaving keeps both measurements under the same machine load; the first
    `warmup_frames` frames are not timed.
    """
    frames = bench_frames(cfg.frames + cfg.warmup_frames, cfg.width, cfg.height, cfg.cameras)
    with tempfile.TemporaryDirectory(prefix="wamdiff2_bench_rig_") as folder:
        names = _rig(cfg).names if cfg.cameras else None
        cfg, renamed = rig_checkpoint(cfg, names, Path(folder)) if names else (cfg, False)
        return _run(cfg, frames, renamed)


def _rig(cfg: BenchConfig):
    from wamdiff2_core.sim.camera import CameraConfig, load_rig

    return load_rig(cfg.cameras, CameraConfig(width=cfg.width, height=cfg.height))


def _image_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str):
    from sensor_msgs.msg import Image

    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8",
                step=rgb.shape[1] * 3)
    msg.data = rgb.tobytes()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 10**9)
    msg.header.frame_id = frame_id
    return msg


def _run(cfg: BenchConfig, frames: list[list[np.ndarray]], renamed: bool) -> BenchResult:
    bare = _BarePlanner(cfg)
    result = BenchResult(frames=cfg.frames, decode=bare.planner.decode_summary(),
                         cameras=bare.planner.cameras, renamed=renamed,
                         prompt_tokens=bare.prompt_tokens(frames[0]))
    with running_node(cfg) as (proc, log, client):
        wait_for(lambda: all(p.get_subscription_count() > 0 for p in client.pubs),
                 cfg.timeout_s, "the node to load, warm up and subscribe", proc, log)
        load = None
        if cfg.question_rate_hz:
            load = QuestionLoad(client.node, f"{NODE}/input/question", cfg.question_rate_hz)
            wait_for(lambda: load.publisher.get_subscription_count() > 0, cfg.timeout_s,
                     "the node's question subscription", proc, log)
        for name in [NO_LOAD] + ([f"questions at {cfg.question_rate_hz:g} Hz"] if load else []):
            phase = Phase(name)
            result.phases.append(phase)
            _run_phase(cfg, frames, bare, result, phase, client, proc, log,
                       None if name == NO_LOAD else load)
    return result


LOADED_FRAME_WAIT_S = 30.0     # under a question load, for a frame's result before the next


def _run_phase(cfg: BenchConfig, frames, bare: _BarePlanner, result: BenchResult,
               phase: Phase, client: NodeClient, proc, log, load: QuestionLoad | None) -> None:
    """The frames one at a time (the bare planner's, then the node's), `load` publishing
    questions meanwhile; the bare-planner and image -> Path columns come from the first
    phase only."""
    first, sent, answers = not result.phases[:-1], load.sent if load else 0, \
        dict(client.answers)
    if load is not None:
        load.start()
    try:
        for i, images in enumerate(frames):
            timed = i >= cfg.warmup_frames
            planner_ms, parsed = bare.time_plan(images)
            start, stamp = _send_frame(cfg, client, images, result.cameras)
            try:
                wait_for(lambda: client.arrival("markers", stamp) and
                         client.arrival("status", stamp),
                         cfg.timeout_s if load is None else LOADED_FRAME_WAIT_S,
                         f"the node's result for frame {i}", proc, log)
            except TimeoutError:
                if load is None:
                    raise
                # under questions a frame may get no Path: counted, and the run goes on
            if timed:
                phase.sent_at[stamp] = start
            if timed and first and client.arrival("markers", stamp):
                _record(result, client, stamp, start, planner_ms, parsed)
    finally:
        if load is not None:
            load.stop()
    time.sleep(1.0)                     # a late second Path of the last frame would be here
    with client._lock:
        for stamp in phase.sent_at:
            if stamp in client.arrived["path"]:
                phase.first_path_at[stamp] = client.arrived["path"][stamp]
            phase.path_counts[stamp] = client.path_counts.get(stamp, 0)
            phase.sources[stamp] = list(client.source_lists.get(stamp, []))
        phase.answers = client.answers["answered"] - answers["answered"]
        phase.refusals = client.answers["refused"] - answers["refused"]
    phase.questions = (load.sent - sent) if load else 0


def _send_frame(cfg: BenchConfig, client: NodeClient, images, cameras) -> tuple[float, int]:
    """Publish one frame, every camera's image with the same stamp, the other cameras'
    `cfg.side_delay_ms` after the trigger's (before it where negative), as a synchronised
    rig's images arrive; (perf_counter at the trigger's publish, the stamp in ns)."""
    now_ns = client.node.get_clock().now().nanoseconds
    msgs = [_image_msg(rgb, now_ns, f"camera_{name}") for rgb, name in zip(images, cameras)]
    others = list(zip(client.pubs, msgs))[1:]
    delay_s = cfg.side_delay_ms / 1e3
    if others and delay_s < 0:
        for pub, msg in others:
            pub.publish(msg)
        time.sleep(-delay_s)
    start = time.perf_counter()
    client.pub.publish(msgs[0])
    if others and delay_s >= 0:
        time.sleep(delay_s)
        for pub, msg in others:
            pub.publish(msg)
    return start, now_ns


def _record(result: BenchResult, client: NodeClient, stamp: int, start: float,
            planner_ms: float, parsed: bool) -> None:
    result.planner_ms.append(planner_ms)
    result.planner_parse_failures += not parsed
    markers_at = client.arrival("markers", stamp)
    result.node_result_ms.append((markers_at - start) * 1e3)
    if client.source(stamp) == "model":
        result.node_path_ms.append((client.arrival("path", stamp) - start) * 1e3)
