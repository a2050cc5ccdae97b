"""The decoders with constraints on: every answer parses with its task's strict parser, the
fast decoder gives the reference's tokens, its steps never sync the host, and the
constrained step compiles on the CPU. Tiny untrained fp32 models (their logits are as good
as random) on the CPU."""
from dataclasses import replace

import pytest
import torch
from test_fast_decoder import HostSyncSpy, encode, early_eoa

from wamdiff2_core import tasks
from engines import fast_decode
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.reference import ar_decode, diffusion_decode
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.tasks.languages import detection_language, planning_language, qa_language

PLANNING = planning_language()
# a model whose end-of-answer wins early (as in test_fast_decoder), so that unconstrained
# answers end at different blocks and the budget and padding paths are exercised
EOA_TOKEN = 339


@pytest.fixture(scope="module")
def model():
    return early_eoa(Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4,
                                               seed=0), EOA_TOKEN)


@pytest.fixture(scope="module")
def ar_model():
    return early_eoa(Wamdiff2Model.from_preset("tiny", paradigm="ar", seed=1), 148)


def texts(model, out):
    return [model.processor.decode_answer(s) for s in out.sequences]


def cfg_for(bs: int, rule: str, **kw) -> DecodeConfig:
    """The shortest planning answer takes 80 tokens: three blocks of 32, or more of 4/1."""
    return DecodeConfig(block_size=bs, commit_rule=rule, max_new_tokens=96 if bs > 1 else 84,
                        steps_per_block=min(bs, 4), constrained=True, **kw)


# every rule at block 32, every block size with the default rule (the full grid of rules x
# blocks x rows runs model-free in test_constraints.py: thousands of steps)
GRID = [(rule, 32, rows) for rule in COMMIT_RULES for rows in (1, 4)] + \
    [("low_confidence_dynamic", bs, rows) for bs in (1, 4) for rows in (1, 4)]


@pytest.mark.parametrize("rule,bs,rows", GRID)
def test_constrained_plans_parse_and_fast_equals_reference(model, camera_images, prompts,
                                                           rule, bs, rows):
    batch = encode(model, prompts, camera_images, rows)
    cfg = cfg_for(bs, rule)
    ref = diffusion_decode(model, batch, cfg, language=PLANNING)
    fast = fast_decode(model, batch, cfg, language=PLANNING)
    assert fast.sequences == ref.sequences and fast.finished == ref.finished
    assert all(ref.finished)
    for text in texts(model, ref):
        assert tasks.parse_waypoints(text).shape == (8, 2)
        assert tasks.format_waypoints(tasks.parse_waypoints(text)) == text


def test_unconstrained_answers_of_the_same_model_do_not_parse(model, camera_images, prompts):
    """Guards the test above: without the constraint this model's plans are not plans."""
    batch = encode(model, prompts, camera_images, 4)
    out = diffusion_decode(model, batch, DecodeConfig(block_size=32, max_new_tokens=96))
    parsed = 0
    for text in texts(model, out):
        try:
            tasks.parse_waypoints(text)
            parsed += 1
        except tasks.AnswerParseError:
            pass
    assert parsed == 0


@pytest.mark.parametrize("lang", [detection_language(max_boxes=2), detection_language(),
                                  qa_language(["yes", "no", "there is no such lane"]),
                                  qa_language()], ids=lambda lang: lang.name)
def test_other_task_languages(model, camera_images, prompts, lang):
    batch = encode(model, prompts, camera_images, 4)
    cfg = DecodeConfig(block_size=32, max_new_tokens=96, steps_per_block=8,
                       commit_rule="low_confidence_leftmost", constrained=True)
    ref = diffusion_decode(model, batch, cfg, language=lang)
    assert fast_decode(model, batch, cfg, language=lang).sequences == ref.sequences
    for text in texts(model, ref):
        assert lang.matches(text)
        if not lang.name.startswith("detection"):
            assert tasks.parse_answer(text) == text.strip()
            continue
        try:
            boxes = tasks.parse_detections(text, 1000, 1000)
        except tasks.AnswerParseError as exc:      # the one check the language leaves out
            assert "x1 <= x2 and y1 <= y2" in str(exc)
        else:
            assert tasks.format_detections(boxes, 1000, 1000) == text


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_padded_batches_sparse_checks_and_sampling(model, camera_images, prompts,
                                                   temperature):
    """Three rows padded to a bucket of four (the padding row sits in DONE), done flags read
    every third step, greedy and sampled: still the reference's tokens."""
    batch = encode(model, prompts, camera_images, 3)
    cfg = cfg_for(32, "low_confidence_dynamic", temperature=temperature, seed=4)
    fast_cfg = FastConfig(pad_batch=True, sync_every=3)
    ref = diffusion_decode(model, batch, cfg, language=PLANNING)
    fast = fast_decode(model, batch, cfg, fast_cfg, language=PLANNING)
    assert fast.sequences == ref.sequences
    assert all(PLANNING.matches(t) for t in texts(model, ref))


def test_constrained_ar_decoders(ar_model, camera_images, prompts):
    """Three rows padded to four, done flags every other token; greedy and sampled."""
    batch = encode(ar_model, prompts, camera_images, 3)
    cfg = DecodeConfig(max_new_tokens=84, constrained=True)
    ref = ar_decode(ar_model, batch, cfg, language=PLANNING)
    fast = fast_decode(ar_model, batch, cfg, FastConfig(pad_batch=True, sync_every=2),
                       language=PLANNING)
    assert fast.sequences == ref.sequences
    assert all(PLANNING.matches(t) for t in texts(ar_model, ref))
    sampled = DecodeConfig(max_new_tokens=84, constrained=True, temperature=1.0, seed=2)
    assert fast_decode(ar_model, batch, sampled, language=PLANNING).sequences == \
        ar_decode(ar_model, batch, sampled, language=PLANNING).sequences


def test_the_switch_and_its_errors(model, camera_images, prompts):
    batch = encode(model, prompts, camera_images, 1)
    off = DecodeConfig(block_size=32, max_new_tokens=96, constrained=False)
    default = DecodeConfig(block_size=32, max_new_tokens=96)
    # off: a language changes nothing; the default: a language given is enforced
    unconstrained = diffusion_decode(model, batch, default).sequences
    assert diffusion_decode(model, batch, off, language=PLANNING).sequences == unconstrained
    assert fast_decode(model, batch, default, language=PLANNING).sequences == \
        diffusion_decode(
        model, batch, replace(default, constrained=True), language=PLANNING).sequences
    assert not PLANNING.matches(texts(model, diffusion_decode(model, batch, default))[0])
    with pytest.raises(ValueError, match="needs the answer's language"):
        fast_decode(model, batch, DecodeConfig(constrained=True))
    with pytest.raises(ValueError, match="takes 80 tokens"):
        diffusion_decode(model, batch, DecodeConfig(max_new_tokens=64, constrained=True),
                         language=PLANNING)
    with pytest.raises(ValueError, match="constrained must be"):
        DecodeConfig(constrained="yes")


@pytest.mark.parametrize("rule", COMMIT_RULES)
def test_constrained_steps_never_sync_the_host(model, ar_model, camera_images, prompts, rule):
    batch = encode(model, prompts, camera_images, 2)
    cfg = DecodeConfig(block_size=4, max_new_tokens=84, commit_rule=rule, constrained=True)
    for fuse in (True, False):
        engine = DecodingEngine(model, "fast", FastConfig(fuse_commit=fuse))
        engine.decode(batch, cfg, PLANNING)
        runner = engine.runner
        st = runner.states[("diffusion", 2, 4, rule, True, fuse, PLANNING)]
        for first in (True, False) if fuse else (False,):
            for last in (False, True):
                with runner.no_autograd():
                    st.step.zero_()
                    st.x.fill_(model.fields.mask_token_id)
                    st.cons.start(84, 2)
                    st.cons.begin_block(0)
                with runner.no_autograd(), HostSyncSpy() as spy:
                    st.run_step(0.0, None, 2, first=first, last=last)
                assert spy.seen == []
                committed = st.x != model.fields.mask_token_id
                assert committed.all() if last else committed.any()
    engine = DecodingEngine(ar_model)
    engine.decode(batch, DecodeConfig(max_new_tokens=84, constrained=True), PLANNING)
    ar_state = engine.runner.states[("ar", 2, True, PLANNING)]
    with HostSyncSpy() as spy:
        ar_state.run_step(0.0, None, 2)
    assert spy.seen == []


def test_the_constrained_step_compiles_on_the_cpu():
    """The fast decoder's constrained selection under torch.compile (inductor, CPU, one
    graph: fullgraph) gives the eager tokens, on a normal step and a budget-end fill. A small
    language and block 4 keep compiling short (the decoder compiles it with the forward in
    mode "compile"; that test is the slow one in test_fast_decoder)."""
    from constraint_fuzz import EOA, MASK

    from wamdiff2_core.decoding.constraints.compile import compile_tokens
    from wamdiff2_core.decoding.constraints.session import FastConstraint
    from wamdiff2_core.tasks.languages import AnswerLanguage

    lang = AnswerLanguage("small", "(?:ab|b)+a?")
    auto = compile_tokens(lang, {2: b"a", 3: b"b", 4: b"ab"}, EOA).on_device("cpu", 5)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 5, generator=gen) * 4
    results = {}
    for mode in ("eager", "compile"):
        cons = FastConstraint(auto, 3, 4, MASK, EOA)
        x = torch.full((3, 4), MASK)
        quota, threshold = torch.tensor([1]), torch.tensor(0.9)

        def block():                 # one step, then the budget-end fill: one graph
            cols = cons.take_logits(logits)
            cons.step(x, cols, "low_confidence_dynamic", quota, False, threshold, 0.0, None)
            after_step = x.clone()
            cons.step(x, cols, "low_confidence_dynamic", quota, True, threshold, 0.0, None)
            return after_step

        run = torch.compile(block, fullgraph=True, dynamic=False) if mode == "compile" \
            else block
        cons.start(9, 3)
        trace = []
        for b in range(3):
            cons.begin_block(4 * b)
            x.fill_(MASK)
            trace += [run(), x.clone()]
        results[mode] = torch.stack(trace)
    assert torch.equal(results["eager"], results["compile"])
    assert (results["eager"][1::2] != MASK).all()
