"""Presets, save/load round trip, checkpoint errors, tokenizers."""
import numpy as np
import pytest
import torch

from wamdiff2_core import tasks
from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model
from wamdiff2_core.model.tokenizer import qwen_tokenizer


@pytest.fixture(scope="module")
def tiny():
    return Wamdiff2Model.from_preset("tiny", block_size=8, seed=3)


def _logits(model):
    img = (np.random.RandomState(1).rand(72, 128, 3) * 255).astype(np.uint8)
    batch = model.processor.encode_prompts([tasks.planning_prompt("right", (5, 0), (0, 0))],
                                           [[img]])
    from wamdiff2_core.model.prompt import prepare_prompt
    p = prepare_prompt(model, batch, model.fields.block_size)
    with torch.no_grad():
        return model.forward_logits(p.input_ids, p.prefill_mask(), p.positions, **p.vision)


def test_save_load_round_trip_gives_identical_logits(tiny, tmp_path):
    tiny.save_pretrained(tmp_path / "ck")
    files = {p.name for p in (tmp_path / "ck").iterdir()}
    assert "model.safetensors" in files and "tokenizer.json" in files
    assert not any(f.endswith((".bin", ".pt", ".pkl")) for f in files)
    loaded = Wamdiff2Model.from_pretrained(tmp_path / "ck")
    assert loaded.fields == tiny.fields
    assert torch.equal(_logits(tiny), _logits(loaded))


def test_pickle_only_checkpoint_is_refused(tiny, tmp_path):
    ck = tmp_path / "pickled"
    tiny.save_pretrained(ck)
    (ck / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(1)}, ck / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle"):
        Wamdiff2Model.from_pretrained(ck)


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "does not exist"),
    (lambda d: d.mkdir(), "config.json is missing"),
])
def test_missing_checkpoint_is_one_clear_error(tmp_path, make, message):
    d = tmp_path / "ck"
    make(d)
    with pytest.raises(CheckpointError, match=message):
        Wamdiff2Model.from_pretrained(d)


def test_corrupt_weights_are_one_clear_error(tiny, tmp_path):
    ck = tmp_path / "corrupt"
    tiny.save_pretrained(ck)
    (ck / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot load checkpoint"):
        Wamdiff2Model.from_pretrained(ck)


def test_2b_preset_builds_on_meta_with_its_parameter_count():
    model = Wamdiff2Model.from_preset("qwen3-vl-2b", device="meta")
    n = model.num_parameters()
    assert 1.9e9 < n < 2.4e9, n          # Qwen3-VL-2B: ~2.1B with tied embeddings
    assert model.fields.mask_token_id == 151671
    assert model.hf.config.image_token_id == 151655


def test_tiny_preset_size():
    n = Wamdiff2Model.from_preset("tiny").num_parameters()
    assert 2e6 < n < 8e6, n


def test_qwen_tokenizer_is_offline_and_splits_digits():
    tok = qwen_tokenizer()
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<|mask|>"]) == [
        151644, 151645, 151671]
    ids = tok.encode("12.34", add_special_tokens=False)
    assert len(ids) == 5 and tok.decode(ids) == "12.34"


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="tiny"):
        Wamdiff2Model.from_preset("huge")
