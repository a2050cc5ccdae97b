"""An rclpy executor spun on a background thread, for the tools' own graph participants."""
from __future__ import annotations

import threading


def spin_in_background(executor, name: str = "ros-spin") -> threading.Thread:
    """Start a daemon thread spinning ``executor`` until it shuts down (an exception from a
    context shut down under it ends the thread quietly); returns the started thread."""
    def spin() -> None:
        try:
            executor.spin()
        except Exception:  # noqa: BLE001 - the context shut down under us
            pass

    thread = threading.Thread(target=spin, name=name, daemon=True)
    thread.start()
    return thread
