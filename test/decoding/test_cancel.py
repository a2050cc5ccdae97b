"""Cooperative cancellation: every decoder (reference and fast; block diffusion, next-token
and exact mode) reads its cancel flag once before each forward pass, stops at the first read
after the flag is set (the forward in flight is the last) with DecodeCancelled, and gives the
same tokens as without a flag when the flag stays clear."""
import threading

import numpy as np
import pytest

from wamdiff2_core.decoding import DecodeCancelled
from wamdiff2_core.decoding.cancel import cancel_scope, check_cancel
from wamdiff2_core.decoding.config import DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.planner import Planner, PlannerConfig
from wamdiff2_core.types import Observation


class CountingFlag:
    """A cancel flag that counts its reads and reads as set from read number `set_at` on."""

    def __init__(self, set_at: float = float("inf")):
        self.set_at, self.reads = set_at, 0

    def is_set(self) -> bool:
        self.reads += 1
        return self.reads >= self.set_at


CASES = [  # (id, model fixture, backend, DecodeConfig, FastConfig)
    ("reference-diffusion", "tiny_diffusion", "reference",
     DecodeConfig(block_size=4, max_new_tokens=12, steps_per_block=4), FastConfig()),
    ("fast-diffusion-fused", "tiny_diffusion", "fast",
     DecodeConfig(block_size=4, max_new_tokens=12, steps_per_block=4), FastConfig()),
    ("fast-diffusion-commit-pass", "tiny_diffusion", "fast",
     DecodeConfig(block_size=4, max_new_tokens=12, steps_per_block=4),
     FastConfig(fuse_commit=False)),
    ("reference-ar", "tiny_ar", "reference", DecodeConfig(max_new_tokens=8), FastConfig()),
    ("fast-ar", "tiny_ar", "fast", DecodeConfig(max_new_tokens=8), FastConfig()),
    ("reference-exact", "tiny_diffusion", "reference",
     DecodeConfig(block_size=4, max_new_tokens=12, mode="exact"), FastConfig()),
    ("fast-exact", "tiny_diffusion", "fast",
     DecodeConfig(block_size=4, max_new_tokens=12, mode="exact"), FastConfig()),
]


def _decode(request, case, flag=None):
    _, fixture, backend, cfg, fast = case
    model = request.getfixturevalue(fixture)
    batch = model.processor.encode_prompts(
        [request.getfixturevalue("prompts")[1]], [[request.getfixturevalue(
            "camera_images")[0]]])
    engine = DecodingEngine(model, backend, fast, verifier="self")
    with cancel_scope(flag):
        return engine.decode(batch, cfg)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_clear_flag_is_read_before_every_forward_and_changes_no_token(request, case):
    plain = _decode(request, case)
    flag = CountingFlag()
    flagged = _decode(request, case, flag)
    assert flagged.sequences == plain.sequences
    assert flag.reads == flagged.stats.forwards > 1, (flag.reads, flagged.stats)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_set_flag_stops_the_decode_before_the_next_forward(request, case):
    total = _decode(request, case, CountingFlag()).stats.forwards
    for set_at in (1, 2, total):                 # before the first, after one, the last one
        flag = CountingFlag(set_at)
        with pytest.raises(DecodeCancelled) as info:
            _decode(request, case, flag)
        assert flag.reads == set_at              # no read (no forward) after the set one
        assert info.value.forwards == set_at - 1, (set_at, info.value.forwards)


def test_the_engine_decodes_again_after_a_cancelled_decode(request):
    """A cancelled decode leaves the fast decoder's state usable: the next decode of the
    same shape gives the tokens of a fresh engine."""
    case = CASES[1]
    _, fixture, backend, cfg, fast = case
    model = request.getfixturevalue(fixture)
    batch = model.processor.encode_prompts([request.getfixturevalue("prompts")[0]], [[
        request.getfixturevalue("camera_images")[1]]])
    engine = DecodingEngine(model, backend, fast)
    expected = engine.decode(batch, cfg).sequences
    with pytest.raises(DecodeCancelled), cancel_scope(CountingFlag(3)):
        engine.decode(batch, cfg)
    assert engine.decode(batch, cfg).sequences == expected
    assert not engine.lock.locked()


def test_no_scope_no_check_and_scopes_nest():
    check_cancel()                                        # no scope: nothing to read
    outer, inner = threading.Event(), threading.Event()
    with cancel_scope(outer):
        with cancel_scope(inner):
            inner.set()
            with pytest.raises(DecodeCancelled):
                check_cancel()
        check_cancel()                                    # the outer flag is clear
        with cancel_scope(None):                          # None keeps the enclosing flag
            outer.set()
            with pytest.raises(DecodeCancelled):
                check_cancel()
    check_cancel()


def test_the_planner_threads_its_cancel_flag_to_plans_answers_and_detections(tiny_diffusion):
    planner = Planner(tiny_diffusion, PlannerConfig(
        DecodeConfig(max_new_tokens=8, constrained=False), backend="reference"))
    image = np.zeros((36, 64, 3), np.uint8)
    stop = threading.Event()
    stop.set()
    with pytest.raises(DecodeCancelled):
        planner.plan(Observation(images=[image], command="left"), cancel=stop)
    with pytest.raises(DecodeCancelled):
        planner.answer([image], "what is ahead?", cancel=stop)
    with pytest.raises(DecodeCancelled):
        planner.detect([image], cancel=stop)
    # a clear flag: the same answer as no flag
    clear = threading.Event()
    assert planner.answer([image], "what?", cancel=clear).text == \
        planner.answer([image], "what?").text


@pytest.mark.gpu
@pytest.mark.parametrize("paradigm", ["diffusion", "ar"])
def test_cuda_graphs_stop_between_replays_and_replay_the_same_after(paradigm, camera_images,
                                                                    prompts):
    """On a GPU the flag is read between graph replays (a host read, no sync): a clear flag
    gives the graphs' tokens, a set one stops at the next read, and the engine's captured
    states give the same tokens after a cancelled decode."""
    from wamdiff2_core.model.modeling import Wamdiff2Model

    model = Wamdiff2Model.from_preset("tiny", paradigm=paradigm, block_size=4, seed=0,
                                      device="cuda")
    batch = model.processor.encode_prompts([prompts[1]], [[camera_images[0]]])
    cfg = DecodeConfig(block_size=4, max_new_tokens=12, steps_per_block=4) \
        if paradigm == "diffusion" else DecodeConfig(max_new_tokens=8)
    engine = DecodingEngine(model, "fast", FastConfig(mode="graphs", attention="sdpa"))
    plain = engine.decode(batch, cfg)
    flag = CountingFlag()
    with cancel_scope(flag):
        assert engine.decode(batch, cfg).sequences == plain.sequences
    assert flag.reads == plain.stats.forwards
    with pytest.raises(DecodeCancelled), cancel_scope(CountingFlag(3)):
        engine.decode(batch, cfg)
    assert engine.decode(batch, cfg).sequences == plain.sequences
