"""A temperature per row (K candidate plans in one batch: row 0 greedy, the others sampled)
and the per-token confidences the block-diffusion decoders return. The bundled model, so
that sampled plans are plans."""
import pytest

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.reference import decode
from wamdiff2_core.planner import load_model

PLANNING = tasks.planning_language()


@pytest.fixture(scope="module")
def bundle():
    return load_model(None)


PROMPT = tasks.planning_prompt("straight", (12.0, 0.0), (0.0, 0.0))


@pytest.fixture(scope="module")
def batch(bundle, camera_images):
    return bundle.processor.encode_prompts([PROMPT] * 4, [[camera_images[0]]] * 4)


@pytest.fixture(scope="module")
def one(bundle, camera_images):
    return bundle.processor.encode_prompts([PROMPT], [[camera_images[0]]])


@pytest.fixture(scope="module")
def greedy(bundle, batch):
    return decode(bundle, batch, DecodeConfig(), language=PLANNING)


def test_greedy_rows_of_a_mixed_batch_are_the_greedy_answers(bundle, batch, greedy):
    mixed = decode(bundle, batch, DecodeConfig(seed=3), language=PLANNING,
                   temperatures=[0.0, 0.8, 0.8, 0.0])
    assert mixed.sequences[0] == mixed.sequences[3] == greedy.sequences[0]
    assert mixed.confidences[0] == pytest.approx(greedy.confidences[0])
    assert len({tuple(s) for s in mixed.sequences}) >= 2          # sampled rows differ
    for seq in mixed.sequences:                                   # and are plans
        tasks.parse_waypoints(bundle.processor.decode_answer(seq))


def test_one_temperature_per_row_equals_the_config_temperature(bundle, batch):
    cfg = DecodeConfig(temperature=0.8, seed=5)
    assert decode(bundle, batch, cfg, language=PLANNING, temperatures=[0.8] * 4
                  ).sequences == decode(bundle, batch, cfg, language=PLANNING).sequences


def test_confidences_are_the_committed_tokens_probabilities(bundle, batch, greedy):
    for seq, conf in zip(greedy.sequences, greedy.confidences):
        assert len(conf) == len(seq) and all(0.0 < c <= 1.0 for c in conf)
    free = decode(bundle, batch, DecodeConfig(constrained=False), language=PLANNING)
    assert [len(c) for c in free.confidences] == [len(s) for s in free.sequences]
    assert all(0.0 < c <= 1.0 for row in free.confidences for c in row)


def test_an_ar_model_refuses_row_temperatures(camera_images):
    ar = load_model("tiny", fields={"paradigm": "ar", "block_size": 1})
    one = ar.processor.encode_prompts([tasks.qa_prompt("Clear?")], [[camera_images[0]]])
    with pytest.raises(ValueError, match="block-diffusion model"):
        decode(ar, one, DecodeConfig(max_new_tokens=4), temperatures=[0.0])


@pytest.mark.parametrize("constrained", [None, False])
def test_fast_copies_of_one_prompt_equal_the_reference_rows(bundle, one, constrained):
    """One prompt prefilled once and copied to five rows (two greedy, three sampled) by the
    fast decoder: the reference's tokens and confidences for five identical rows."""
    cfg = DecodeConfig(seed=7, constrained=constrained)
    temps = [0.0, 0.9, 0.9, 0.9, 0.0]
    engine = DecodingEngine(bundle, "fast")
    fast = engine.decode(one, cfg, PLANNING, temps)
    ref = DecodingEngine(bundle, "reference").decode(one, cfg, PLANNING, temps)
    assert fast.sequences == ref.sequences and len(fast.sequences) == 5
    for f, r in zip(fast.confidences, ref.confidences):
        assert f == pytest.approx(r, abs=1e-5)
    assert fast.sequences[0] == fast.sequences[4] == engine.decode(one, cfg, PLANNING
                                                                   ).sequences[0]


def test_row_temperatures_are_refused_where_they_cannot_be(bundle, batch):
    engine = DecodingEngine(bundle, "fast")
    with pytest.raises(ValueError, match="3 temperatures for a batch of 4 prompts"):
        engine.decode(batch, DecodeConfig(), PLANNING, [0.0, 0.5, 0.5])
    with pytest.raises(ValueError, match="not exact mode"):
        engine.decode(batch, DecodeConfig(mode="exact"), PLANNING, [0.0] * 4)
