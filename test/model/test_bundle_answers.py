"""The bundled model answers exactly what it answered when the answers were recorded: on six
committed simulator frames (plans, detections, questions), with the default decoding on both
backends and the fast planning rule. Re-record after a deliberate change (a new bundle):
``.venv/bin/python test/helpers/bundle_answers.py --record`` (see that file)."""
import json

import pytest

from bundle_answers import ANSWERS, RECORDS, SETTINGS, compute_answers
from wamdiff2_core.types import bundled_checkpoint_path

pytestmark = pytest.mark.skipif(bundled_checkpoint_path() is None,
                                reason="this checkout has no bundled model")


def test_bundle_answers_are_the_recorded_ones():
    want = json.loads(ANSWERS.read_text())
    assert set(want) == {name for name, _, _ in SETTINGS}
    got = compute_answers()
    n = len(json.loads(RECORDS.read_text()))
    for name in want:
        assert len(got[name]) == len(want[name]) == n
        diff = [(i, w, g) for i, (w, g) in enumerate(zip(want[name], got[name])) if w != g]
        assert not diff, (f"{name}: {len(diff)} of {n} answers changed (first: record "
                          f"{diff[0][0]}: {diff[0][1]!r} -> {diff[0][2]!r}); if the change is "
                          "deliberate, re-record: .venv/bin/python test/helpers/"
                          "bundle_answers.py --record")
