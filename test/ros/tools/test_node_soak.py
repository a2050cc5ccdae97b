"""`bench soak`'s summary (the soak itself is a 10-minute benchmark, run by hand: README,
"Reliability"): every node counter that counted something is reported, so a run says why
its fallbacks were published."""
from wamdiff2_ros.tools.node_soak import SoakResult


def test_the_summary_names_what_caused_the_fallbacks():
    result = SoakResult(sent=30, elapsed_s=2.0, rss_mb=[(0.0, 400.0), (2.0, 410.0)],
                        latency_ms=[100.0, 300.0], sources={"model": 2, "last_plan": 1},
                        diagnostics={"state": "active", "frames_planned": "3",
                                     "fallback_paths": "1", "odometry_stale": "1",
                                     "parse_failures": "0", "planner_ms.p50": "90.0"})
    s = result.summary()
    assert s["rss_mb"] == {"start": 400.0, "end": 410.0, "max": 410.0}
    assert s["node"]["odometry_stale"] == "1" and s["node"]["parse_failures"] == "0"
    assert "state" not in s["node"] and s["node"]["planner_ms.p50"] == "90.0"
    assert "odometry_stale 1" in result.lines()
