"""Constrained decoding on a GPU: the constrained selection captured in CUDA graphs (and
compiled, then captured) gives the reference's tokens, every plan parses, and the captured
step never syncs the host. Skipped without CUDA (conftest)."""
import pytest
from test_fast_decoder import HostSyncSpy

from engines import fast_decode
from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.reference import decode as reference_decode
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.tasks.languages import detection_language, planning_language

pytestmark = pytest.mark.gpu
PLANNING = planning_language()


@pytest.fixture(scope="module")
def cuda_models():
    return {p: Wamdiff2Model.from_preset("tiny", paradigm=p, block_size=4, seed=0,
                                         device="cuda") for p in ("diffusion", "ar")}


def _encode(model, prompts, images, rows):
    return model.processor.encode_prompts(prompts[:rows], [[i] for i in images[:rows]])


@pytest.mark.parametrize("mode", ["graphs", "compile-graphs"])
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("bs", [1, 4, 32])
@pytest.mark.parametrize("rule", COMMIT_RULES)
def test_constrained_graphs_equal_reference(cuda_models, camera_images, prompts, rule, bs,
                                            rows, mode):
    if mode == "compile-graphs" and (bs, rows) != (32, 4):
        pytest.skip("compile-graphs: one shape per rule (compiling takes a while)")
    model = cuda_models["diffusion"]
    batch = _encode(model, prompts, camera_images, rows)
    cfg = DecodeConfig(block_size=bs, commit_rule=rule, steps_per_block=min(bs, 4),
                       max_new_tokens=84 if bs == 1 else 96, constrained=True)
    fast = fast_decode(model, batch, cfg, FastConfig(mode=mode, attention="sdpa"),
                       language=PLANNING)
    assert fast.sequences == reference_decode(model, batch, cfg, language=PLANNING).sequences
    assert all(PLANNING.matches(model.processor.decode_answer(s)) for s in fast.sequences)


def test_constrained_ar_graphs_and_detection(cuda_models, camera_images, prompts):
    graphs = FastConfig(mode="graphs", attention="sdpa")
    ar = cuda_models["ar"]
    batch = _encode(ar, prompts, camera_images, 3)
    cfg = DecodeConfig(max_new_tokens=84, constrained=True)
    assert fast_decode(ar, batch, cfg, graphs, language=PLANNING).sequences == \
        reference_decode(ar, batch, cfg, language=PLANNING).sequences
    model, lang = cuda_models["diffusion"], detection_language()
    batch = _encode(model, prompts, camera_images, 4)
    cfg = DecodeConfig(block_size=32, max_new_tokens=96, steps_per_block=8, constrained=True,
                       commit_rule="low_confidence_leftmost")
    assert fast_decode(model, batch, cfg, graphs, language=lang).sequences == \
        reference_decode(model, batch, cfg, language=lang).sequences


def test_captured_constrained_steps_never_sync(cuda_models, camera_images, prompts):
    model = cuda_models["diffusion"]
    graphs = FastConfig(mode="graphs", attention="sdpa")
    batch = _encode(model, prompts, camera_images, 2)
    cfg = DecodeConfig(block_size=32, max_new_tokens=96, constrained=True)
    engine = DecodingEngine(model, "fast", graphs)
    engine.decode(batch, cfg, PLANNING)
    st = engine.runner.states[("diffusion", 2, 32, "low_confidence_dynamic", True, True,
                               PLANNING)]
    for last in (False, True):
        with HostSyncSpy() as spy:
            st.run_step(0.0, None, 2, last=last)
        assert spy.seen == []
