"""The rclpy race behind wamdiff2_ros/node/spin_thread.py, as a record.

A thread creates and destroys a subscription with QoS event callbacks in a loop while the
main thread spins a MultiThreadedExecutor, at a given GIL switch interval; `--direct` does
it on the churning thread itself (what planner_node did before), otherwise through
SpinThreadCalls. Prints whether spin_once raised, after how long, and how many churns.

    python docs/runs/spin_thread/race.py --seconds 20 --interval 0.0005 --direct
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

import rclpy
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.executors import MultiThreadedExecutor
from rclpy.qos import QoSProfile
from std_msgs.msg import String

from wamdiff2_ros.node.spin_thread import SpinThreadCalls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.0005)
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--domain", type=int, default=77)
    args = ap.parse_args()
    sys.setswitchinterval(args.interval)
    rclpy.init(domain_id=args.domain)
    node = rclpy.create_node("race")
    executor = MultiThreadedExecutor(num_threads=3)
    executor.add_node(node)
    calls = SpinThreadCalls(node.create_guard_condition(lambda: None).trigger)
    if not args.direct:
        calls.bind()
    stop, count = threading.Event(), [0]

    def churn_once():
        events = SubscriptionEventCallbacks(incompatible_qos=lambda _: None,
                                            message_lost=lambda _: None)
        sub = node.create_subscription(String, "t", lambda _: None, QoSProfile(depth=1),
                                       event_callbacks=events)
        node.destroy_subscription(sub)

    def churn():
        while not stop.is_set():
            calls.call(churn_once)          # unbound (--direct): runs on this thread
            count[0] += 1

    thread = threading.Thread(target=churn)
    thread.start()
    t0, outcome = time.monotonic(), "no error"
    try:
        while time.monotonic() - t0 < args.seconds:
            executor.spin_once(timeout_sec=0.01)
            calls.run_pending()
    except Exception as exc:  # noqa: BLE001 - the record
        outcome = f"spin_once raised {exc!r} after {time.monotonic() - t0:.2f} s"
    stop.set()
    calls.unbind()
    thread.join()
    mode = "direct" if args.direct else "SpinThreadCalls"
    print(f"{mode}, switch interval {args.interval:g} s, {args.seconds:g} s: {outcome}; "
          f"{count[0]} subscriptions created and destroyed")


if __name__ == "__main__":
    main()
