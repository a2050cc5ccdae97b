"""`wamdiff2 bench dds`: how many camera frames a subscriber in another process receives
under this machine's DDS setting.

A publisher (this process; reliable by default, as most camera drivers and `bag replay` are)
sends ``frames`` rgb8 images at ``rate_hz`` once the subscriber has matched and settled; the
subscriber (a child process, ``python -m wamdiff2_ros.tools.dds_delivery CONFIG``, with this
process's environment, or with ``sub_profile`` as its Fast DDS profile) counts what arrives
and how late. The DDS setting under test is whatever the environment says.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wamdiff2_ros.node.dds import FAST_DDS_VARIABLES

TOPIC = "/wamdiff2_bench_dds/image"
QOS = ("reliable", "best_effort")
STRAGGLER_S = 2.0          # the subscriber keeps listening this long after the last frame


@dataclass(frozen=True)
class DeliveryConfig:
    """One delivery run: image size, rate, frame count, the two sides' QoS, the wait between
    the match and the first frame, the subscriber's own Fast DDS profile ("" for the
    environment's setting) and the ROS_DOMAIN_ID."""

    width: int = 640
    height: int = 360
    rate_hz: float = 15.0
    frames: int = 60
    pub_qos: str = "reliable"
    sub_qos: str = "best_effort"
    settle_s: float = 2.0
    sub_profile: str = ""
    domain_id: int = 0


@dataclass(frozen=True)
class DeliveryResult:
    """What arrived: frames sent and received, latency p50/p95 in ms (None with none
    received), and the DDS variables the run was under."""

    config: DeliveryConfig
    received: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    env: dict

    def line(self) -> str:
        c = self.config
        lat = ("-" if self.latency_p50_ms is None
               else f"{self.latency_p50_ms:.1f} / {self.latency_p95_ms:.1f} ms")
        env = ", ".join(f"{k}={v}" for k, v in self.env.items()) or "Fast DDS defaults"
        return (f"{c.width}x{c.height} @ {c.rate_hz:g} Hz, {c.pub_qos} -> {c.sub_qos}: "
                f"{self.received}/{c.frames} delivered, latency p50/p95 {lat}; {env}"
                + (f"; subscriber profile {c.sub_profile}" if c.sub_profile else ""))

    def summary(self) -> dict:
        return {**dataclasses.asdict(self.config), "sent": self.config.frames,
                "received": self.received, "latency_p50_ms": self.latency_p50_ms,
                "latency_p95_ms": self.latency_p95_ms, "env": self.env}


def _qos(kind: str, depth: int):
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

    if kind == "best_effort":
        return qos_profile_sensor_data
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE)


def _subscribe(cfg: DeliveryConfig, done_file: str) -> dict:
    """The child's side: count frames until the parent's done file appears (plus
    stragglers); ``{"received", "latency_ms"}``."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image

    context = Context()
    rclpy.init(args=[], context=context, domain_id=cfg.domain_id)
    node = rclpy.create_node("wamdiff2_bench_dds_sub", context=context)
    latencies: list[float] = []

    def image_callback(msg: Image) -> None:
        sent = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        latencies.append((time.time() - sent) * 1e3)
    node.create_subscription(Image, TOPIC, image_callback, _qos(cfg.sub_qos, 1))
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    deadline = time.monotonic() + cfg.frames / cfg.rate_hz + 60.0
    while time.monotonic() < deadline and not os.path.exists(done_file):
        executor.spin_once(timeout_sec=0.05)
    end = time.monotonic() + STRAGGLER_S
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown(context=context)
    return {"received": len(latencies), "latency_ms": latencies}


def _sub_env(cfg: DeliveryConfig) -> dict:
    """The subscriber's environment: this one, plus ``sub_profile`` (the receiving side's own
    Fast DDS profile, as a node's launch environment would set it)."""
    env = dict(os.environ)
    if cfg.sub_profile:
        env["FASTRTPS_DEFAULT_PROFILES_FILE"] = cfg.sub_profile
    return env


def measure_delivery(cfg: DeliveryConfig) -> DeliveryResult:
    """Publish ``cfg.frames`` images to a subscriber in a child process and count what it
    received; RuntimeError where the subscriber never matched or failed."""
    import rclpy
    from rclpy.context import Context
    from sensor_msgs.msg import Image

    domain = cfg.domain_id or 1 + os.getpid() % 101
    cfg = dataclasses.replace(cfg, domain_id=domain)
    with tempfile.TemporaryDirectory(prefix="wamdiff2_bench_dds_") as tmp:
        done_file = str(Path(tmp) / "done")
        child = subprocess.Popen(
            [sys.executable, "-m", "wamdiff2_ros.tools.dds_delivery",
             json.dumps({**dataclasses.asdict(cfg), "done_file": done_file})],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_sub_env(cfg))
        context = Context()
        rclpy.init(args=[], context=context, domain_id=domain)
        try:
            node = rclpy.create_node("wamdiff2_bench_dds_pub", context=context)
            pub = node.create_publisher(Image, TOPIC, _qos(cfg.pub_qos, 10))
            deadline = time.monotonic() + 60.0
            while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                if child.poll() is not None:
                    break
                time.sleep(0.05)
            matched = pub.get_subscription_count() > 0
            if matched:
                time.sleep(cfg.settle_s)
                _publish(pub, cfg, Image)
                if cfg.pub_qos == "reliable":   # the last frames may still be in flight
                    from rclpy.duration import Duration
                    pub.wait_for_all_acked(Duration(seconds=5.0))
            Path(done_file).touch()
            node.destroy_node()
        finally:
            rclpy.shutdown(context=context)
        out, err = child.communicate(timeout=cfg.frames / cfg.rate_hz + 120)
    if child.returncode != 0:
        raise RuntimeError(f"the subscriber process failed (exit {child.returncode}): "
                           f"{err.strip()[-500:]}")
    if not matched:
        raise RuntimeError("the subscriber never matched the publisher within 60 s: the two "
                           "DDS settings may not discover each other")
    got = json.loads(out.strip().splitlines()[-1])
    lat = got["latency_ms"]
    return DeliveryResult(
        cfg, got["received"],
        float(np.percentile(lat, 50)) if lat else None,
        float(np.percentile(lat, 95)) if lat else None,
        {k: v for k, v in os.environ.items() if k in ("RMW_IMPLEMENTATION", *FAST_DDS_VARIABLES)})


def _publish(pub, cfg: DeliveryConfig, image_type) -> None:
    """``cfg.frames`` random rgb8 frames at ``cfg.rate_hz``, each stamped with the wall time
    it was sent (the subscriber's latency is its arrival time minus that)."""
    rgb = (np.random.default_rng(0).random((cfg.height, cfg.width, 3)) * 255).astype(np.uint8)
    msg = image_type(height=cfg.height, width=cfg.width, encoding="rgb8", step=cfg.width * 3)
    msg.data = rgb.tobytes()
    start = time.monotonic()
    for i in range(cfg.frames):
        time.sleep(max(0.0, start + i / cfg.rate_hz - time.monotonic()))
        now = time.time()
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(now), int((now % 1) * 1e9)
        pub.publish(msg)


if __name__ == "__main__":                     # the subscriber side, started by the publisher
    fields = json.loads(sys.argv[1])
    done = fields.pop("done_file")
    print(json.dumps(_subscribe(DeliveryConfig(**fields), done)), flush=True)
