"""A planner's decode settings: `plan_decode` decodes planning answers, `decode` the rest."""
from dataclasses import replace

import numpy as np
import pytest

from wamdiff2_core import tasks
from wamdiff2_core.decoding import backends
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.planner import Observation, Planner

SEEN: list[DecodeConfig] = []


@pytest.fixture(scope="module")
def recording_backend():
    """The fast decoder, registered under another name, noting the settings of each call."""
    fast = backends.DECODER_BACKENDS["fast"]

    def record(model, batch, cfg, **kw):
        SEEN.append(cfg)
        return fast(model, batch, cfg, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(backends.DECODER_BACKENDS, "recording", record)
        yield "recording"


def test_plan_decode_applies_to_planning_answers_only(recording_backend):
    model = Wamdiff2Model.from_preset("tiny", block_size=4, seed=0)
    decode = DecodeConfig(max_new_tokens=8, constrained=False)   # (a plan needs 80 tokens)
    plan_decode = replace(decode, commit_rule="low_confidence_leftmost", steps_per_block=2)
    planner = Planner(model, decode, recording_backend, plan_decode=plan_decode)
    image = np.zeros((36, 64, 3), np.uint8)

    SEEN.clear()
    planner.plan_batch([Observation([image])])
    planner.answer([image], "Is the left lane free?")
    with pytest.raises(tasks.AnswerParseError):             # an untrained model's boxes
        planner.detect([image])
    # detection: the same settings with the budget of a long box list (DETECTION_MAX_NEW_TOKENS)
    assert SEEN == [plan_decode, decode, planner.detection_decode]
    assert planner.detection_decode == replace(decode, max_new_tokens=320)

    SEEN.clear()
    planner.warmup(64, 36)                  # a plan, and a question for the other settings
    assert SEEN == [plan_decode, decode]

    kept = planner.reconfigure(replace(decode, threshold=0.5))
    assert kept.plan_decode == plan_decode and kept.decode.threshold == 0.5
    dropped = planner.reconfigure(plan_decode=None)
    assert dropped.plan_decode is None and dropped.planning_decode == decode
    SEEN.clear()
    dropped.warmup(64, 36)
    assert SEEN == [decode]
