"""Scratch (not part of the package): the overload test's node (SLOW_TINY: 64-token plans)
and a 30 Hz 640x360 camera for 12 s; prints how many frames were planned and the first plans'
times (the node's ~/output/stats planning.ms). With py-spy on PATH and NOSPY unset it also
records the node's threads (`--gil`) over the first 8 s into OUT/spy.txt.
    python node_run.py ROS_DOMAIN_ID OUT_DIR"""
import os, subprocess, sys, time
sys.path.insert(0, "/work/main/test/helpers"); sys.path.insert(0, "/work/main/test/ros/node")
from ros_harness import FAST_TINY, NodeProcess, RosClient, rgb_image_msg, stamp_msg, domain_id
from sim_frames import sim_frames
from pathlib import Path
SLOW_TINY = dict(FAST_TINY, **{"decode.max_new_tokens": 64, "decode.steps_per_block": 32,
                               "decode.commit_rule": "low_confidence_static"})
dom = int(sys.argv[1]); out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
os.environ["ROS_DOMAIN_ID"] = str(dom)
node = NodeProcess(dom, out, SLOW_TINY)
client = RosClient(dom)
try:
    client.wait_ready(node)
    client.wait_matched(client.image_pub)
    msgs = [rgb_image_msg(f.rgb, 0.0) for f in sim_frames(30, 640, 360)]
    spy = None if os.environ.get("NOSPY") else subprocess.Popen(["py-spy", "record", "--pid", str(node.proc.pid), "--threads", "--gil",
                            "-r", "100", "-d", "8", "-f", "raw", "-o", str(out / "spy.txt")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    time.sleep(0.5)
    start = time.monotonic(); stamps = []
    for i in range(int(30 * 12)):
        time.sleep(max(0.0, start + i / 30 - time.monotonic()))
        m = msgs[i % len(msgs)]; t = client.now(); m.header.stamp = stamp_msg(t)
        client.image_pub.publish(m); stamps.append(t)
    spy and spy.wait(30)
    time.sleep(1.0)
    got = [s for s in (client.stats_for(t) for t in stamps) if s]
    print("plans:", len(got), "plan ms:", [s.get("planning.ms") for s in got[:10]])
finally:
    client.close(); node.stop()
