"""`SpinThreadCalls`: subscriptions created and destroyed on the thread that spins, so that
rclpy never meets a half-destroyed QoS event handler while it builds a wait set
(wamdiff2_ros/node/spin_thread.py has the race; docs/runs/spin_thread/ the record)."""
from __future__ import annotations

import sys
import threading
import time

import pytest
import rclpy
from rclpy.context import Context
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.executors import MultiThreadedExecutor
from rclpy.qos import QoSProfile
from std_msgs.msg import String

from wamdiff2_ros.node.spin_thread import SpinThreadCalls


def _spin_until(calls: SpinThreadCalls, done, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        calls.run_pending()
        time.sleep(0.001)


def test_unbound_calls_run_where_they_are_made():
    calls = SpinThreadCalls(wake=lambda: pytest.fail("nothing to wake"))
    seen = []
    thread = threading.Thread(target=lambda: seen.append(
        calls.call(threading.get_ident)))
    thread.start()
    thread.join()
    assert seen == [thread.ident] and calls.run_pending() == 0


def test_a_call_from_another_thread_runs_on_the_bound_thread():
    wakes = []
    calls = SpinThreadCalls(wake=lambda: wakes.append(1))
    calls.bind()
    assert calls.call(threading.get_ident) == threading.get_ident()   # the bound thread: now
    result = []
    thread = threading.Thread(target=lambda: result.append(calls.call(threading.get_ident)))
    thread.start()
    _spin_until(calls, lambda: result)
    thread.join()
    assert result == [threading.get_ident()] and wakes == [1]


def test_the_callers_get_the_error_and_a_timeout():
    calls = SpinThreadCalls(wake=lambda: None)
    calls.bind()
    errors = []

    def caller(fn, timeout_s):
        try:
            calls.call(fn, timeout_s=timeout_s)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    def boom():
        raise ValueError("boom")

    thread = threading.Thread(target=caller, args=(boom, 10.0))
    thread.start()
    _spin_until(calls, lambda: errors)
    thread.join()
    assert [type(e) for e in errors] == [ValueError]
    errors.clear()
    thread = threading.Thread(target=caller, args=(lambda: None, 0.05))   # nobody spins
    thread.start()
    thread.join()
    assert [type(e) for e in errors] == [TimeoutError]


def test_unbinding_runs_what_is_queued_and_then_calls_run_in_place():
    calls = SpinThreadCalls(wake=lambda: None)
    calls.bind()
    ran = []
    thread = threading.Thread(target=lambda: calls.call(lambda: ran.append(
        threading.get_ident()), wait=False))
    thread.start()
    thread.join()
    assert ran == []                                   # queued for the spinning thread
    calls.unbind()
    assert ran == [threading.get_ident()] and not calls.bound
    thread = threading.Thread(target=lambda: calls.call(lambda: ran.append(
        threading.get_ident())))
    thread.start()
    thread.join()
    assert ran[-1] == thread.ident


def test_subscriptions_churned_through_it_do_not_break_a_spinning_executor(ros_domain):
    """Another thread creates and destroys a subscription with QoS event callbacks in a loop
    beside a spinning MultiThreadedExecutor, at a 10 µs GIL switch interval. Done directly
    from that thread, `spin_once` raises InvalidHandle within about a second
    (docs/runs/spin_thread/race.py); through `SpinThreadCalls` it spins on."""
    context = Context()
    rclpy.init(args=[], context=context, domain_id=ros_domain)
    node = rclpy.create_node("spin_thread_churn", context=context)
    executor = MultiThreadedExecutor(num_threads=3, context=context)
    executor.add_node(node)
    wake = node.create_guard_condition(lambda: None)
    calls = SpinThreadCalls(wake.trigger)
    calls.bind()
    stop, churned = threading.Event(), []

    def churn_once():
        events = SubscriptionEventCallbacks(incompatible_qos=lambda _: None,
                                            message_lost=lambda _: None)
        sub = node.create_subscription(String, "churn", lambda _: None, QoSProfile(depth=1),
                                       event_callbacks=events)
        node.destroy_subscription(sub)

    def churn():
        while not stop.is_set():
            calls.call(churn_once)
            churned.append(1)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=churn)
    try:
        thread.start()
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
            calls.run_pending()
    finally:
        sys.setswitchinterval(previous)
        stop.set()
        calls.unbind()
        thread.join(10)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert len(churned) > 100, len(churned)
