"""Plan times of the overload test's planner alone, beside a thread that holds the GIL in pure
Python (busy), and beside one that converts a 640x360 frame at 30 Hz (camera); each with the
default switch interval (5 ms) and with 0.5 ms.  python gil_probe.py [THREADS]"""
import statistics, sys, threading, time
import numpy as np, torch
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.planner import Planner, load_model
from wamdiff2_core.types import Observation

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
planner = Planner(load_model("tiny"), DecodeConfig(max_new_tokens=64, steps_per_block=32,
                  commit_rule="low_confidence_static", constrained=False))
img = np.random.default_rng(0).integers(0, 255, (360, 640, 3), np.uint8)
obs = Observation(images=[img])
planner.warmup()

def busy(stop):
    while not stop.is_set():
        sum(i * i for i in range(2000))

def camera(stop):
    raw = img.tobytes()
    while not stop.is_set():
        t = time.monotonic()
        a = np.frombuffer(raw, np.uint8).reshape(360, 640, 3)[..., ::-1].copy()
        sum(i for i in range(20000))           # ~1 ms of Python per frame (callback work)
        time.sleep(max(0.0, 1 / 30 - (time.monotonic() - t)))

def plans(n=5):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        try:
            planner.plan(obs)
        except Exception:
            pass
        out.append((time.perf_counter() - t) * 1e3)
    return out

for interval in (0.005, 0.0005):
    sys.setswitchinterval(interval)
    for name, fn in (("alone", None), ("busy", busy), ("camera", camera)):
        stop = threading.Event()
        th = threading.Thread(target=fn, args=(stop,), daemon=True) if fn else None
        if th: th.start()
        ms = plans()
        stop.set()
        if th: th.join()
        print(f"switch {interval * 1e3:.1f} ms, {name:6s}: plan ms median {statistics.median(ms):7.0f}, max {max(ms):7.0f}")
