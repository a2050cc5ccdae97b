"""Exact decoding: the answers are the verifier's greedy answers token for token, on every
prompt of the bundled fixtures (plans, detections, questions; constrained and not; draft
budgets 1, 2 and the block size), also when the verifier disagrees with every draft; the
fast decoder gives the reference's tokens with the same drafts, and its steps never sync
the host. The bundled model drafts, its AR teacher (or its own weights read next-token)
verifies; tiny untrained models cover batches, padding and the commit pass."""
import json

import pytest
import torch
from PIL import Image
from test_fast_decoder import HostSyncSpy, early_eoa, encode

from bundle_answers import FIXTURE, RECORDS
from engines import fast_decode
from wamdiff2_core import tasks
from wamdiff2_core.decoding.attention import SdpaAttention
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig, FastConfig
from wamdiff2_core.decoding.constraints.session import automaton_for
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.exact import exact_decode
from wamdiff2_core.decoding.fast_exact import CausalSdpaAttention, fast_exact_decode
from wamdiff2_core.decoding.reference import ar_decode
from wamdiff2_core.decoding.runner import FastRunner
from wamdiff2_core.decoding.static_model import StaticTextModel
from wamdiff2_core.decoding.verify import check_verifier, guesses, self_verifier
from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model
from wamdiff2_core.planner import load_model
from wamdiff2_core.types import bundled_checkpoint_path

LANGUAGES = {"planning": tasks.planning_language(), "detection": tasks.detection_language(),
             "qa": tasks.qa_language()}
BUDGETS = [ExactConfig(draft_steps=1), ExactConfig(draft_steps=2),
           ExactConfig(draft_steps=32, min_tail=32, verify_width=32)]   # a full draft
MAX_NEW = 128


@pytest.fixture(scope="module")
def bundle():
    """(drafter, AR teacher, task -> encoded batch of the task's fixture records)."""
    model = load_model(None)
    teacher = load_model(f"{bundled_checkpoint_path()}/ar_teacher")
    records = json.loads(RECORDS.read_text())
    batches = {}
    for task in LANGUAGES:
        mine = [r for r in records if r["task"] == task]
        prompts = [tasks.record_prompt_and_answer(r)[0] for r in mine]
        images = [[Image.open(FIXTURE / p).convert("RGB") for p in r["image"]] for r in mine]
        batches[task] = model.processor.encode_prompts(prompts, images)
    return model, teacher, batches


def cfg_for(constrained: bool) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=MAX_NEW, constrained=constrained)


def fast_exact(model, verifier, batch, cfg, exact, language=None, fast=FastConfig()):
    auto = automaton_for(model, language, cfg.max_new_tokens) if language else None
    return fast_exact_decode(FastRunner(model, fast), FastRunner(verifier, fast), batch, cfg,
                             exact, auto)


def reference_exact(model, verifier, batch, cfg, exact, language=None):
    auto = automaton_for(model, language, cfg.max_new_tokens) if language else None
    return exact_decode(model, verifier, batch, cfg, exact, auto)


def same_drafts(a, b) -> bool:
    keys = ("tokens", "blocks", "row_blocks", "verify_forwards", "denoise_forwards",
            "drafts")
    return all(getattr(a.stats, k) == getattr(b.stats, k) for k in keys)


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
@pytest.mark.parametrize("task", list(LANGUAGES))
def test_exact_answers_are_the_teachers_greedy_answers(bundle, task, constrained):
    model, teacher, batches = bundle
    cfg, language = cfg_for(constrained), LANGUAGES[task] if constrained else None
    want = fast_decode(teacher, batches[task], cfg, language=language)
    assert ar_decode(teacher, batches[task], cfg, language=language).sequences == \
        want.sequences                              # (both AR decoders agree to begin with)
    for exact in BUDGETS:
        out = fast_exact(model, teacher, batches[task], cfg, exact, language)
        assert out.sequences == want.sequences, exact
        assert out.finished == want.finished
        assert out.stats.tokens == want.stats.tokens
        assert out.stats.accepted_per_block > 1.5       # the drafts are worth something


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_self_verifier_answers_are_the_drafters_own_greedy_answers(bundle, constrained):
    model, _, batches = bundle
    cfg = cfg_for(constrained)
    language = LANGUAGES["planning"] if constrained else None
    verifier = self_verifier(model)
    want = fast_decode(verifier, batches["planning"], cfg, language=language)
    out = fast_exact(model, verifier, batches["planning"], cfg, ExactConfig(), language)
    assert out.sequences == want.sequences
    assert out.stats.accepted_per_block > 1.5


def test_the_engine_decodes_exact_mode_with_the_checkpoints_teacher(bundle):
    """``DecodeConfig(mode="exact")`` through a DecodingEngine: the default verifier is the
    bundled checkpoint's ar_teacher/, on both backends; a given one is checked."""
    model, teacher, batches = bundle
    cfg = DecodeConfig(max_new_tokens=MAX_NEW, mode="exact")
    want = fast_decode(teacher, batches["qa"], DecodeConfig(max_new_tokens=MAX_NEW))
    for backend in ("fast", "reference"):
        engine = DecodingEngine(model, backend)
        assert engine.decode(batches["qa"], cfg).sequences == want.sequences
        assert engine.exact_verifier().origin.endswith("ar_teacher")
    mine = DecodingEngine(model, verifier=teacher, exact=ExactConfig(draft_steps=2))
    out = mine.decode(batches["qa"], cfg)
    assert out.sequences == want.sequences and mine.exact_verifier() is teacher
    assert out.stats.denoise_forwards > 0
    assert "exact (the verifier's greedy answers)" in cfg.summary()


def test_exact_mode_refusals(drafter, verifier, camera_images, prompts, tmp_path):
    batch = encode(drafter, prompts, camera_images, 1)
    exact_cfg = DecodeConfig(max_new_tokens=8, mode="exact")
    with pytest.raises(ValueError, match="does not sample"):
        DecodeConfig(mode="exact", temperature=0.5)
    with pytest.raises(ValueError, match="mode must be one of"):
        DecodeConfig(mode="fastest")
    with pytest.raises(ValueError, match="drafts with a diffusion model"):
        DecodingEngine(verifier).decode(batch, exact_cfg)
    with pytest.raises(CheckpointError):
        DecodingEngine(drafter, verifier=tmp_path).decode(batch, exact_cfg)
    # a preset ships no teacher: the default verifier is the drafter itself
    engine = DecodingEngine(drafter)
    assert engine.exact_verifier().fields.paradigm == "ar"
    assert engine.decode(batch, exact_cfg).sequences == \
        ar_decode(verifier, batch, DecodeConfig(max_new_tokens=8)).sequences


@pytest.mark.slow   # the reference decoder over every fixture prompt: minutes on 2 cores
@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
@pytest.mark.parametrize("task", list(LANGUAGES))
def test_reference_exact_equals_fast_on_the_fixtures(bundle, task, constrained):
    model, teacher, batches = bundle
    cfg, language = cfg_for(constrained), LANGUAGES[task] if constrained else None
    for exact in BUDGETS:
        ref = reference_exact(model, teacher, batches[task], cfg, exact, language)
        fast = fast_exact(model, teacher, batches[task], cfg, exact, language)
        assert fast.sequences == ref.sequences and same_drafts(fast, ref)


def random_verifier(model: Wamdiff2Model, seed: int, never: int) -> Wamdiff2Model:
    """An AR model of random weights that reads ``model``'s prompts (its processor) and
    whose logit of token ``never`` is 0 (below the best of the others')."""
    noise = Wamdiff2Model.from_preset("tiny", paradigm="ar", seed=seed)
    with torch.no_grad():
        noise.hf.lm_head.weight[never] = 0.0
    return type(model)(noise.hf, model.processor, noise.fields.with_(
        eoa_token_id=model.fields.eoa_token_id, mask_token_id=model.fields.mask_token_id,
        pad_token_id=model.fields.pad_token_id), origin="random weights")


def test_a_verifier_that_rejects_every_draft_still_gets_its_own_answer(bundle):
    """A drafter whose logits are all 0 drafts token 0 everywhere; a verifier of random
    weights never chooses it: every round keeps only the verifier's own token (without its
    lookahead, which would feed the verifier's own guesses back to it), and the answer is
    still the verifier's greedy answer."""
    _, _, batches = bundle
    useless = load_model(None)
    with torch.no_grad():
        useless.hf.lm_head.weight.zero_()
    verifier = random_verifier(useless, seed=5, never=0)
    cfg = DecodeConfig(max_new_tokens=40)
    for task in ("planning", "qa"):
        want = ar_decode(verifier, batches[task], cfg)
        assert not any(0 in s for s in want.sequences)
        for decode in (fast_exact, reference_exact):
            out = decode(useless, verifier, batches[task], cfg,
                         ExactConfig(draft_steps=2, lookahead=False))
            assert out.sequences == want.sequences
            assert out.stats.row_blocks == out.stats.tokens     # one token per round
            assert out.stats.blocks == max(len(s) + f for s, f in zip(out.sequences,
                                                                       out.finished))
            looked = decode(useless, verifier, batches[task], cfg, ExactConfig(draft_steps=2))
            assert looked.sequences == want.sequences


# ------------------------------------------------------------------ tiny models
@pytest.fixture(scope="module")
def drafter():
    return early_eoa(Wamdiff2Model.from_preset("tiny", paradigm="diffusion", block_size=4,
                                               seed=0), 339)


@pytest.fixture(scope="module")
def verifier(drafter):
    """The drafter's weights read next-token: untrained, but it agrees with some drafts."""
    return self_verifier(drafter)


TINY = [ExactConfig(1, 1, 4), ExactConfig(2, 2, 3, lookahead=False), ExactConfig(4, 4, 4)]


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "commit-pass"])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_fast_exact_equals_reference_and_ar(drafter, verifier, camera_images, prompts, fuse,
                                            rows, constrained):
    batch = encode(drafter, prompts, camera_images, rows)
    language = tasks.detection_language() if constrained else None   # closes in the budget
    cfg = DecodeConfig(max_new_tokens=24, constrained=constrained)
    want = ar_decode(verifier, batch, cfg, language=language)
    fast = FastConfig(fuse_commit=fuse, pad_batch=True)        # 3 rows run in a bucket of 4
    for exact in TINY:
        ref = reference_exact(drafter, verifier, batch, cfg, exact, language)
        out = fast_exact(drafter, verifier, batch, cfg, exact, language, fast)
        assert ref.sequences == want.sequences and ref.finished == want.finished
        assert out.sequences == ref.sequences and same_drafts(out, ref)
        commits = ref.stats.forwards - ref.stats.denoise_forwards - ref.stats.verify_forwards
        assert out.stats.forwards == ref.stats.forwards - (commits if fuse else 0)


def test_rows_end_at_different_rounds(drafter, verifier, camera_images, prompts):
    """Guards the fixtures: rows of one batch accept different counts and end apart."""
    batch = encode(drafter, prompts, camera_images, 3)
    out = reference_exact(drafter, verifier, batch, DecodeConfig(max_new_tokens=24),
                          ExactConfig(2, 2, 4))
    assert any(out.finished) and len({len(s) for s in out.sequences}) == 3
    assert 1.0 < out.stats.accepted_per_block


def test_steps_never_sync_the_host(drafter, verifier, camera_images, prompts):
    batch = encode(drafter, prompts, camera_images, 2)
    for constrained in (False, True):
        language = tasks.detection_language() if constrained else None
        runner, v_runner = FastRunner(drafter), FastRunner(verifier)
        cfg = DecodeConfig(max_new_tokens=24, constrained=constrained)
        auto = automaton_for(drafter, language, 24) if language else None
        fast_exact_decode(runner, v_runner, batch, cfg, ExactConfig(2, 2, 4), auto)
        (draft,) = [s for key, s in runner.states.items() if key[0] == "exact"]
        (verify,) = v_runner.states.values()          # the verifier's state in its runner
        assert verify.draft is draft and not any(k[0] == "verify" for k in runner.states)
        with runner.no_autograd(), HostSyncSpy() as spy:
            draft.begin()
            for first, last in ((True, False), (False, True)):
                draft.drafts[(first, last)]()
            verify.verify()
        assert spy.seen == []


def test_a_verifier_must_share_the_tokenizer_and_be_next_token(drafter, verifier,
                                                                camera_images, prompts):
    with pytest.raises(ValueError, match="does not share the drafter's tokenizer "
                                         r"\(end-of-answer id differ\)"):
        check_verifier(drafter, verifier.with_fields(eoa_token_id=3))
    with pytest.raises(ValueError, match=r"\(image preprocessing differ\)"):
        check_verifier(drafter, verifier.with_max_pixels(64 * 64))
    with pytest.raises(ValueError, match="next-token"):
        check_verifier(drafter, drafter)
    batch = encode(drafter, prompts, camera_images, 1)
    with pytest.raises(ValueError, match="does not sample"):
        exact_decode(drafter, verifier, batch, DecodeConfig(temperature=0.7))
    with pytest.raises(ValueError, match="draft_steps must be an integer >= 1"):
        ExactConfig(draft_steps=0)


def test_guesses_after_the_draft_left_the_language_are_plain_greedy_tokens():
    """Past a drafted token outside the answer's language the verifier's constrained choice
    means nothing (no state to choose from): the lookahead guesses with its plain greedy
    token there, and keeps its constrained choice where the path is still a word's prefix
    (the guesses once filled a window with end-of-answer tokens, one token per round)."""
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 50)
    plain = logits.argmax(-1)[0]
    choice = torch.tensor([[plain[0] + 1, plain[1] + 1, plain[2] + 1]])
    states = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]])     # (1, 3, S): none at 1
    out = guesses(logits, choice, mask_id=49, states=states)
    assert out.tolist() == [[choice[0, 0].item(), plain[1].item(), choice[0, 2].item()]]
    assert guesses(logits, choice, 49) is choice                    # unconstrained: as is


def test_causal_attention_reads_as_next_token_steps(verifier):
    """A block read at once by ``CausalSdpaAttention`` gives each position the logits of the
    next-token forward after its prefix (float tolerance): it never sees later keys."""
    text, w, n = StaticTextModel(verifier), 5, 20
    torch.manual_seed(0)
    ids = torch.randint(10, 300, (2, n + w))
    pos = torch.arange(n + w).expand(3, 2, -1)
    cos, sin = text.rope(pos)
    attn = SdpaAttention(text.num_q_heads, text.num_kv_heads, text.head_dim, text.scale)
    causal = CausalSdpaAttention(text.num_q_heads, text.num_kv_heads, text.head_dim,
                                 text.scale, w)
    caches = [text.new_cache(2, 64), text.new_cache(2, 64)]
    slots = torch.arange(n + w).expand(2, -1)
    with torch.inference_mode():
        for cache in caches:                   # the same context in both caches
            text.forward(ids[:, :n], cos[:, :n], sin[:, :n], slots[:, :n],
                         torch.full((2,), n), cache, attn)
        block = text.forward(ids[:, n:], cos[:, n:], sin[:, n:], slots[:, n:],
                             torch.full((2,), n + w), caches[0], causal)
        steps = [text.forward(ids[:, n + i:n + i + 1], cos[:, n + i:n + i + 1],
                              sin[:, n + i:n + i + 1], slots[:, n + i:n + i + 1],
                              torch.full((2,), n + i + 1), caches[1], attn)
                 for i in range(w)]
    torch.testing.assert_close(block, torch.cat(steps, 1), atol=1e-5, rtol=1e-5)
