"""`bench node --question-rate`'s per-phase figures: every Path is counted by its frame's
stamp (a frame without one and a frame with two both show), latency is to the first Path
whatever its source, and the p99 ratio is the load phase's over the no-question phase's."""
from wamdiff2_ros.tools.node_bench_load import NO_LOAD, Phase, p99_ratio, phase_table


def test_paths_are_counted_per_frame_with_their_sources():
    quiet = Phase(NO_LOAD, sent_at={1: 0.0, 2: 0.0}, first_path_at={1: 0.1, 2: 0.2},
                  path_counts={1: 1, 2: 1}, sources={1: ["model"], 2: ["model"]})
    loaded = Phase("questions at 10 Hz", sent_at={3: 0.0, 4: 0.0, 5: 0.0},
                   first_path_at={3: 0.3, 4: 0.5}, path_counts={3: 2, 4: 1},
                   sources={3: ["stop", "model"], 4: ["model"]}, questions=10, answers=4,
                   refusals=5)
    s = loaded.summary()
    assert s["paths_per_frame"] == 1.0 and s["frames_without_path"] == 1
    assert s["frames_with_several_paths"] == 1
    assert s["path_sources"] == {"model": 2, "stop": 1}
    assert s["frame_to_path_ms"]["n"] == 2 and s["frame_to_path_ms"]["max"] == 500.0
    assert s["questions"] == {"sent": 10, "answered": 4, "refused": 5}
    assert "questions" not in quiet.summary()
    assert p99_ratio([quiet, loaded]) == round(loaded.summary()["frame_to_path_ms"]["p99"] /
                                               quiet.summary()["frame_to_path_ms"]["p99"], 2)
    assert p99_ratio([quiet]) is None
    table = phase_table([quiet, loaded])
    assert "1 frame(s) without a Path, 1 with several" in table
    assert "1 not answered by the phase's end" in table and "p99 with questions" in table
