#!/usr/bin/env python3
"""How many camera frames a best-effort (or reliable) subscriber in another process receives.

    .venv/bin/python scripts/dds_delivery.py --size 640x360 --rate 15 --frames 60
    FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA .venv/bin/python scripts/dds_delivery.py ...
    FASTRTPS_DEFAULT_PROFILES_FILE=config/fastdds_camera.xml RMW_FASTRTPS_USE_QOS_FROM_XML=0 \
        .venv/bin/python scripts/dds_delivery.py ...

A publisher (this process; reliable by default, as most camera drivers and `bag replay` are)
sends `--frames` rgb8 frames of `--size` at `--rate` Hz once the subscriber has matched and
settled; the subscriber (a child process with the same environment) counts what arrives and
its latency. Prints one line per run: size, rate, QoS pair, delivered/sent, latency
p50/p95. The DDS setting under test is whatever the environment says (it is inherited).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

TOPIC = "/dds_delivery/image"


def _qos(kind: str, depth: int):
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    if kind == "best_effort":
        return qos_profile_sensor_data
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE)


def _subscriber(args) -> None:
    import rclpy
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node("dds_delivery_sub")
    latencies: list[float] = []

    def on_image(msg: Image) -> None:
        sent = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        latencies.append(time.time() - sent)
    node.create_subscription(Image, TOPIC, on_image, _qos(args.sub_qos, 1))
    deadline = time.monotonic() + args.frames / args.rate + 60.0
    while time.monotonic() < deadline and not os.path.exists(args.done_file):
        rclpy.spin_once(node, timeout_sec=0.05)
    end = time.monotonic() + 2.0                        # stragglers
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    print(json.dumps({"received": len(latencies), "latency_ms": [x * 1e3 for x in latencies]}),
          flush=True)
    node.destroy_node()
    rclpy.shutdown()


def _sub_env(args) -> dict:
    """The subscriber's environment: this one, plus `--sub-profile` (the receiving side's own
    Fast DDS profile, as a node's launch environment would set it)."""
    env = dict(os.environ)
    if args.sub_profile:
        env["FASTRTPS_DEFAULT_PROFILES_FILE"] = args.sub_profile
    return env


def _publisher(args) -> dict:
    import rclpy
    from sensor_msgs.msg import Image

    width, height = (int(v) for v in args.size.lower().split("x"))
    done_file = f"/tmp/dds_delivery_{os.getpid()}.done"
    if os.path.exists(done_file):
        os.remove(done_file)
    child = subprocess.Popen([sys.executable, __file__, "--role", "sub", "--size", args.size,
                              "--rate", str(args.rate), "--frames", str(args.frames),
                              "--sub-qos", args.sub_qos, "--done-file", done_file],
                             stdout=subprocess.PIPE, text=True, env=_sub_env(args))
    rclpy.init()
    node = rclpy.create_node("dds_delivery_pub")
    pub = node.create_publisher(Image, TOPIC, _qos(args.pub_qos, 10))
    deadline = time.monotonic() + 60.0
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(args.settle_s)
    rgb = (np.random.RandomState(0).rand(height, width, 3) * 255).astype(np.uint8)
    msg = Image(height=height, width=width, encoding="rgb8", step=width * 3)
    msg.data = rgb.tobytes()
    start = time.monotonic()
    for i in range(args.frames):
        time.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        now = time.time()
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(now), int((now % 1) * 1e9)
        pub.publish(msg)
    open(done_file, "w").close()
    out, _ = child.communicate(timeout=120)
    os.remove(done_file)
    node.destroy_node()
    rclpy.shutdown()
    result = json.loads(out.strip().splitlines()[-1])
    lat = result["latency_ms"]
    return {"size": args.size, "rate_hz": args.rate, "pub_qos": args.pub_qos,
            "sub_qos": args.sub_qos, "sent": args.frames, "received": result["received"],
            "latency_p50_ms": float(np.percentile(lat, 50)) if lat else None,
            "latency_p95_ms": float(np.percentile(lat, 95)) if lat else None,
            "env": {k: v for k, v in os.environ.items()
                    if k.startswith(("FASTDDS", "FASTRTPS", "RMW_FASTRTPS"))},
            "sub_profile": args.sub_profile}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("pub", "sub"), default="pub")
    p.add_argument("--size", default="640x360", help="WxH (default 640x360)")
    p.add_argument("--rate", type=float, default=15.0, help="frames per second (default 15)")
    p.add_argument("--frames", type=int, default=60, help="frames to send (default 60)")
    p.add_argument("--pub-qos", choices=("reliable", "best_effort"), default="reliable")
    p.add_argument("--sub-qos", choices=("reliable", "best_effort"), default="best_effort")
    p.add_argument("--settle-s", type=float, default=2.0,
                   help="wait after the match before the first frame (default 2)")
    p.add_argument("--sub-profile", default="",
                   help="a Fast DDS XML profile for the subscriber only (the publisher keeps "
                        "the environment's setting)")
    p.add_argument("--done-file", default="")
    args = p.parse_args(argv)
    if args.role == "sub":
        _subscriber(args)
        return 0
    r = _publisher(args)
    lat = "-" if r["latency_p50_ms"] is None else \
        f"{r['latency_p50_ms']:.1f} / {r['latency_p95_ms']:.1f} ms"
    print(f"{r['size']} @ {r['rate_hz']:g} Hz, {r['pub_qos']} -> {r['sub_qos']}: "
          f"{r['received']}/{r['sent']} delivered, latency p50/p95 {lat}  env {r['env']}"
          + (f" subscriber profile {r['sub_profile']}" if r["sub_profile"] else ""),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
