"""The fast decoders give the reference decoders' tokens, and their steps never sync the host.

Tiny fp32 models on the CPU (eager mode; compile is in the slow test). Models whose
end-of-answer logit copies a frequent token's make rows end at different blocks, so the
finished-row and early-stop paths are exercised, not only full-length answers.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engines import fast_decode
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.reference import ar_decode, diffusion_decode
from wamdiff2_core.model.modeling import Wamdiff2Model

RULES = list(COMMIT_RULES)


def early_eoa(model: Wamdiff2Model, token: int) -> Wamdiff2Model:
    """End-of-answer wins wherever ``token`` would have (with a positive logit)."""
    w = model.hf.lm_head.weight
    with torch.no_grad():
        w[model.fields.eoa_token_id] = w[token] * 1.5
    return model


@pytest.fixture(scope="module")
def diffusion_model():
    return early_eoa(Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4,
                                               seed=0), 339)


@pytest.fixture(scope="module")
def ar_model():
    return early_eoa(Wamdiff2Model.from_preset("tiny", paradigm="ar", seed=1), 148)


def encode(model, prompts, camera_images, n):
    return model.processor.encode_prompts(prompts[:n], [[im] for im in camera_images[:n]])


def small_cfg(bs: int, rule: str, **kw) -> DecodeConfig:
    """Two or more blocks, a short step budget (so the static rules commit several per step)."""
    return DecodeConfig(block_size=bs, commit_rule=rule, max_new_tokens=6 if bs == 1 else
                        (12 if bs == 4 else 40), steps_per_block=min(bs, 4), **kw)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("bs", [1, 4, 32])
@pytest.mark.parametrize("rule", RULES)
def test_fast_diffusion_equals_reference(diffusion_model, camera_images, prompts, rule, bs,
                                         rows, fuse):
    batch = encode(diffusion_model, prompts, camera_images, rows)
    cfg = small_cfg(bs, rule)
    ref = diffusion_decode(diffusion_model, batch, cfg)
    fast = fast_decode(diffusion_model, batch, cfg, FastConfig(fuse_commit=fuse))
    assert fast.sequences == ref.sequences
    assert fast.finished == ref.finished
    assert (fast.stats.denoise_forwards, fast.stats.blocks, fast.stats.tokens) == \
        (ref.stats.denoise_forwards, ref.stats.blocks, ref.stats.tokens)
    if rows > 1:                 # (the first prompt alone ends in its first block)
        assert ref.stats.blocks >= 2                      # blocks were committed
    # fused: each commit pass rides on the next block's first step
    commits = ref.stats.forwards - ref.stats.denoise_forwards
    assert commits == ref.stats.blocks - 1
    assert fast.stats.forwards == ref.stats.forwards - (commits if fuse else 0)


def test_rows_really_end_at_different_blocks(diffusion_model, ar_model, camera_images,
                                             prompts):
    """Guards the fixtures: without mixed endings the tests above would not test them."""
    for model, fn in ((diffusion_model, diffusion_decode), (ar_model, ar_decode)):
        out = fn(model, encode(model, prompts, camera_images, 4), DecodeConfig(max_new_tokens=16))
        assert any(out.finished) and not all(out.finished)
        assert len({len(s) for s in out.sequences}) >= 3


@pytest.mark.parametrize("rows", [1, 4])
def test_fast_ar_equals_reference(ar_model, camera_images, prompts, rows):
    batch = encode(ar_model, prompts, camera_images, rows)
    cfg = DecodeConfig(max_new_tokens=16)
    ref, fast = ar_decode(ar_model, batch, cfg), fast_decode(ar_model, batch, cfg)
    assert fast.sequences == ref.sequences and fast.finished == ref.finished
    assert (fast.stats.forwards, fast.stats.tokens) == (ref.stats.forwards, ref.stats.tokens)


@pytest.mark.parametrize("paradigm", ["diffusion", "ar"])
def test_sampling_follows_the_reference_random_stream(diffusion_model, ar_model,
                                                      camera_images, prompts, paradigm):
    model = diffusion_model if paradigm == "diffusion" else ar_model
    ref_fn = diffusion_decode if paradigm == "diffusion" else ar_decode
    batch = encode(model, prompts, camera_images, 4)
    cfg = DecodeConfig(max_new_tokens=12, temperature=1.0, seed=3, steps_per_block=2)
    assert fast_decode(model, batch, cfg).sequences == ref_fn(model, batch, cfg).sequences


@pytest.mark.parametrize("paradigm", ["diffusion", "ar"])
def test_padded_batch_and_sparse_done_checks_keep_the_tokens(diffusion_model, ar_model,
                                                             camera_images, prompts, paradigm):
    """Padding 3 rows to a bucket of 4 and checking the done flags every 3 steps only adds
    no-op steps: the answers stay the reference's."""
    model = diffusion_model if paradigm == "diffusion" else ar_model
    ref_fn = diffusion_decode if paradigm == "diffusion" else ar_decode
    batch = encode(model, prompts, camera_images, 3)
    cfg = DecodeConfig(max_new_tokens=12)
    fast_cfg = FastConfig(pad_batch=True, sync_every=3)
    ref = ref_fn(model, batch, cfg)
    engine = DecodingEngine(model, "fast", fast_cfg)
    fast = engine.decode(batch, cfg)
    assert engine.runner.bucket(3) == 4
    assert fast.sequences == ref.sequences
    steps = (lambda s: s.denoise_forwards) if paradigm == "diffusion" else \
        (lambda s: s.forwards)
    assert steps(fast.stats) >= steps(ref.stats)


def test_state_is_reused_and_grows_for_longer_requests(diffusion_model, camera_images,
                                                       prompts):
    engine = DecodingEngine(diffusion_model, "fast", FastConfig(len_multiple=8))
    runner = engine.runner
    batch = encode(diffusion_model, prompts, camera_images, 1)
    engine.decode(batch, DecodeConfig(max_new_tokens=4))
    (state,) = runner.states.values()
    engine.decode(batch, DecodeConfig(max_new_tokens=4))
    assert list(runner.states.values()) == [state]
    longer = DecodeConfig(max_new_tokens=16)
    out = engine.decode(batch, longer)
    assert out.sequences == diffusion_decode(diffusion_model, batch, longer).sequences
    (grown,) = runner.states.values()
    assert grown.cache.max_len > state.cache.max_len


def test_threads_sharing_an_engine_take_turns(diffusion_model, camera_images, prompts):
    """Planners sharing an engine share its states' buffers; concurrent calls must not mix
    (they take turns on the engine's lock)."""
    import threading

    batches = [encode(diffusion_model, prompts[i:], camera_images[i:], 1) for i in range(4)]
    cfg = DecodeConfig(max_new_tokens=8)
    want = [diffusion_decode(diffusion_model, b, cfg).sequences for b in batches]
    got = [None] * 4
    engine = DecodingEngine(diffusion_model)

    def work(i):
        got[i] = engine.decode(batches[i], cfg).sequences

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


class HostSyncSpy(TorchDispatchMode):
    """Records ops that make the host wait for a device: reading a value (.item(), bool()),
    nonzero, and indexing with boolean masks."""

    SYNC_OPS = {"aten._local_scalar_dense.default", "aten.nonzero.default",
                "aten.masked_select.default"}
    INDEX_OPS = {"aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default"}

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in self.SYNC_OPS:
            self.seen.append(name)
        elif name in self.INDEX_OPS:
            indices = args[1] if len(args) > 1 else []
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
                self.seen.append(name + " (boolean mask)")
        return func(*args, **(kwargs or {}))


def test_sync_spy_catches_host_syncs():
    x = torch.randn(4)
    for fn in (lambda: x.sum().item(), lambda: x[x > 0], lambda: bool((x > 0).any()),
               lambda: (x > 0).nonzero(), lambda: x[torch.tensor(1)]):
        with HostSyncSpy() as spy:
            fn()
        assert spy.seen, fn


def assert_diffusion_steps_never_sync(model, batch, rule: str) -> None:
    """Decode ``batch`` (2 rows, block 4) fused and unfused, then run each state's steps (and
    commit pass) under the spy: no host sync, and each step commits."""
    for fuse in (True, False):
        engine = DecodingEngine(model, "fast", FastConfig(fuse_commit=fuse))
        engine.decode(batch, DecodeConfig(max_new_tokens=8, commit_rule=rule, threshold=0.9))
        runner = engine.runner
        st = runner.states[("diffusion", 2, 4, rule, True, fuse)]
        for first in (True, False) if fuse else (False,):
            with runner.no_autograd():  # the state's buffers are inference tensors in eager mode
                st.step.zero_()
                st.x.fill_(model.fields.mask_token_id)
            with runner.no_autograd(), HostSyncSpy() as spy:
                st.run_step(0.0, None, 2, first=first)
                if not fuse:
                    st.commit()
            assert spy.seen == []
            assert (st.x != model.fields.mask_token_id).any()  # the step did commit


@pytest.mark.parametrize("rule", RULES)
def test_steps_never_sync_the_host(diffusion_model, ar_model, camera_images, prompts, rule):
    batch = encode(diffusion_model, prompts, camera_images, 2)
    assert_diffusion_steps_never_sync(diffusion_model, batch, rule)

    engine = DecodingEngine(ar_model)
    engine.decode(batch, DecodeConfig(max_new_tokens=4))
    ar_state = engine.runner.states[("ar", 2, True)]
    with HostSyncSpy() as spy:
        ar_state.run_step(0.0, None, 2)
    assert spy.seen == []


@pytest.mark.slow   # torch.compile of two step functions takes minutes on 2 CPU cores
@pytest.mark.parametrize("paradigm", ["diffusion", "ar"])
def test_compiled_steps_equal_reference(diffusion_model, ar_model, camera_images, prompts,
                                        paradigm):
    model = diffusion_model if paradigm == "diffusion" else ar_model
    ref_fn = diffusion_decode if paradigm == "diffusion" else ar_decode
    batch = encode(model, prompts, camera_images, 3)
    cfg = DecodeConfig(max_new_tokens=12)
    fast = fast_decode(model, batch, cfg, FastConfig(mode="compile"))
    assert fast.sequences == ref_fn(model, batch, cfg).sequences


@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_frontier"])
def test_blocks_stop_once_every_answer_is_settled(diffusion_model, camera_images, prompts,
                                                  rule, monkeypatch):
    """Once no row has a masked position before its end-of-answer token, both decoders stop
    denoising the block: the same answers as running the block's every step (what the
    reference repository does), in fewer forwards (the early-ending model's answers end
    with masked positions after the end-of-answer token). One prompt per decode, so that
    a row that ends early is not kept going by the others."""
    from wamdiff2_core.decoding import fast as fast_mod, reference as ref_mod

    cfg = DecodeConfig(block_size=32, commit_rule=rule, threshold=0.999, max_new_tokens=64)
    batches = [encode(diffusion_model, prompts[i:], camera_images[i:], 1) for i in range(4)]

    def decode_all():
        return ([diffusion_decode(diffusion_model, b, cfg) for b in batches],
                [fast_decode(diffusion_model, b, cfg) for b in batches])

    def forwards(outs):
        return sum(o.stats.denoise_forwards for o in outs)

    early_ref, early_fast = decode_all()
    every_step = lambda x, mask_id, eoa: x == mask_id                     # noqa: E731
    monkeypatch.setattr(ref_mod, "unsettled", every_step)
    monkeypatch.setattr(fast_mod, "unsettled", every_step)
    full_ref, full_fast = decode_all()
    for outs in (full_ref, early_fast, full_fast):
        assert [o.sequences for o in outs] == [o.sequences for o in early_ref]
        assert [o.finished for o in outs] == [o.finished for o in early_ref]
    assert any(o.finished[0] for o in early_ref)
    assert forwards(early_fast) == forwards(early_ref)
    assert forwards(full_fast) == forwards(full_ref)
    assert forwards(early_ref) < forwards(full_ref)
