"""Real checkpoints drop in (issue 14): a random Qwen3-VL directory saved by transformers in its
own layout (real Qwen3-VL vocabulary without <|mask|>, Qwen3-VL preprocessor config, chat
template) and the same in the reference repository's format load and decode through the
public Planner API with no edits; their pixel values are transformers' own; the diffusion
fields say where they came from; a non-Qwen vocabulary that states no field is one sentence
naming the field and the flag."""
import json

import numpy as np
import pytest
import torch
from qwen_checkpoints import CHAT_TEMPLATE, to_reference_format, write_qwen3_vl
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.model.modeling import CheckpointError, Wamdiff2Model
from wamdiff2_core.planner import Observation, Planner, PlannerConfig

# Both sides of 224x320 are multiples of 32 and it holds more than the 65536-pixel minimum:
# neither the reference's qwen_vl_utils nor the image processor resizes it.
IMAGE = (np.random.RandomState(7).rand(224, 320, 3) * 255).astype(np.uint8)
# Unconstrained: a constrained plan in the Qwen vocabulary (a digit a token) needs 80 tokens,
# more than this quick decode's budget; constrained decoding has its own tests.
QUICK = DecodeConfig(max_new_tokens=16, commit_rule="low_confidence_static", steps_per_block=2,
                     constrained=False)
CONVENTION = {"paradigm": "diffusion", "block_size": 32, "mask_token_id": 151671,
              "eoa_token_id": 151645, "pad_token_id": 151643}


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return write_qwen3_vl(tmp_path_factory.mktemp("qwen") / "Qwen3-VL-tiny")


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory):
    path = write_qwen3_vl(tmp_path_factory.mktemp("ref") / "WAM-Diff2-tiny", seed=1)
    return to_reference_format(path, block_size=16)


def _decodes(planner: Planner) -> None:
    """Both backends decode the same tokens; planning gives a plan or an AnswerParseError
    holding the raw text (a random model's answer), never another exception."""
    ref = planner.reconfigure(PlannerConfig(QUICK, backend="reference"))
    fast = planner.reconfigure(PlannerConfig(QUICK, backend="fast"))
    prompt = tasks.qa_prompt("Is the left lane free?")
    a, stats = ref.generate([prompt], [[IMAGE]])
    b, _ = fast.generate([prompt], [[IMAGE]])
    assert a == b and stats.tokens > 0
    obs = Observation(images=[IMAGE], command="left", velocity=(5.0, 0.0),
                      acceleration=(0.0, 0.0))
    try:
        fast.plan(obs)
    except tasks.AnswerParseError as exc:
        assert exc.raw_text is not None


def test_plain_qwen3_vl_directory_decodes_with_no_edits(qwen_dir):
    assert json.loads((qwen_dir / "config.json").read_text())["model_type"] == "qwen3_vl"
    assert "wamdiff2" not in json.loads((qwen_dir / "config.json").read_text())
    planner = Planner.from_pretrained(qwen_dir)
    model = planner.model
    assert model.processor.tokenizer.convert_tokens_to_ids("<|mask|>") is None
    assert {k: getattr(model.fields, k) for k in CONVENTION} == CONVENTION
    assert set(model.sources.values()) == {"Qwen3-VL convention"}
    text = model.describe()
    assert "mask_token_id=151671 (Qwen3-VL convention)" in text
    assert "preprocessor_config.json" in text and "its chat template" in text
    _decodes(planner)


def test_reference_format_directory_decodes_with_its_own_fields(reference_dir):
    planner = Planner.from_pretrained(reference_dir)
    model = planner.model
    assert model.fields.block_size == 16                  # the reference config's, not 32
    assert model.sources == {"paradigm": "reference config", "block_size": "reference config",
                             "mask_token_id": "reference config",
                             "eoa_token_id": "reference config",
                             "pad_token_id": "Qwen3-VL convention"}
    assert model.hf.config.text_config.rope_parameters["mrope_section"] == [6, 5, 5]
    _decodes(planner)


@pytest.mark.parametrize("which", ["qwen", "reference"])
def test_pixel_values_are_transformers_own(which, qwen_dir, reference_dir):
    """Bit for bit transformers' PIL Qwen2-VL image processor reading the checkpoint's
    preprocessor_config.json, and (x / 255 - 0.5) / 0.5 by hand on the first patches."""
    path = qwen_dir if which == "qwen" else reference_dir
    processor = Wamdiff2Model.from_pretrained(path).processor
    ours = processor.process_images([IMAGE])
    theirs = Qwen2VLImageProcessorPil.from_pretrained(str(path))(images=[IMAGE],
                                                                return_tensors="pt")
    assert torch.equal(ours["image_grid_thw"], theirs["image_grid_thw"])
    assert ours["image_grid_thw"].tolist() == [[1, 14, 20]]          # not resized
    assert torch.equal(ours["pixel_values"], theirs["pixel_values"])
    by_hand = (IMAGE.astype(np.float32) / 255 - 0.5) / 0.5           # (H, W, 3)
    for index, (row, col) in enumerate([(0, 0), (0, 16), (16, 0), (16, 16)]):
        patch = by_hand[row:row + 16, col:col + 16].transpose(2, 0, 1)   # (3, 16, 16)
        want = np.repeat(patch[:, None], 2, axis=1).reshape(-1)          # (3 * 2 * 16 * 16)
        np.testing.assert_allclose(ours["pixel_values"][index].numpy(), want, atol=1e-6)
    # With transformers' CLIP defaults (what the processor used before) they were far off.
    clip = Qwen2VLImageProcessorPil(patch_size=16, size={"shortest_edge": 65536,
                                                         "longest_edge": 16777216})
    off = (clip(images=[IMAGE], return_tensors="pt")["pixel_values"]
           - ours["pixel_values"]).abs().max()
    assert off > 1.0


def test_prompt_ids_are_the_reference_inference_paths(qwen_dir):
    """A record written by hand in the reference's conversation format: the reference's
    inference (src/wam_diff/inference/gpu.py) builds messages from it, renders them with the
    processor's chat template (add_generation_prompt) and lets Qwen3VLProcessor expand each
    image pad to grid.prod() // merge**2 pads; the planner's processor gives the same ids."""
    record = {"id": "43ebecce459052f2", "datasource": "navsim", "image": ["CAM_F0.jpg"],
              "conversations": [
                  {"from": "human", "value": "Here is the front view: <image>\nInstruction: "
                                             "plan the next 4 seconds. "},
                  {"from": "gpt", "value": "2.26,-0.17,4.51,-0.30"}]}
    prompt, _ = tasks.record_prompt_and_answer(record)
    processor = Wamdiff2Model.from_pretrained(qwen_dir).processor
    ours = processor.encode_prompts([prompt], [[IMAGE]])

    # The reference's path, step by step.
    tok = processor.tokenizer
    content = []
    for i, part in enumerate(prompt.split("<image>")):
        if part.strip():
            content.append({"type": "text", "text": part.strip()})
        if i < 1:
            content.append({"type": "image", "image": IMAGE})
    text = tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                   add_generation_prompt=True, chat_template=CHAT_TEMPLATE)
    grid = Qwen2VLImageProcessorPil.from_pretrained(str(qwen_dir))(
        images=[IMAGE], return_tensors="pt")["image_grid_thw"][0]
    text = text.replace("<|image_pad|>", "<|image_pad|>" * (int(grid.prod()) // 4))
    want = tok(text, add_special_tokens=False)["input_ids"]
    assert ours["input_ids"][0].tolist() == want
    assert want[:3] == [151644, 872, 198]               # <|im_start|> user \n
    assert want[-3:] == [151644, 77091, 198]            # <|im_start|> assistant \n
    assert want.count(151655) == 70                     # 14 x 20 patches / 4


def test_non_qwen_vocabulary_names_the_missing_field_and_its_flag(tmp_path):
    """The project's own BPE, no wamdiff2 section: nothing to take the fields from."""
    ck = tmp_path / "bare"
    Wamdiff2Model.from_preset("tiny", block_size=4, seed=2).save_pretrained(ck)
    cfg = json.loads((ck / "config.json").read_text())
    del cfg["wamdiff2"]
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as err:
        Planner.from_pretrained(ck)
    message = str(err.value)
    assert "block_size" in message and "--block-size" in message
    assert "mask_token_id" in message and message.count(". ") == 0     # one sentence
    given = {"block_size": 4, "mask_token_id": 7, "eoa_token_id": 2, "pad_token_id": 0}
    planner = Planner.from_pretrained(ck, fields=given)
    assert planner.model.sources["mask_token_id"] == "override"
    assert planner.model.sources["paradigm"] == "default"
    _decodes(planner)
    with pytest.raises(ValueError, match="unknown diffusion field 'mask_id'"):
        Planner.from_pretrained(ck, fields={"mask_id": 7})


def test_overrides_replace_a_checkpoints_own_fields(qwen_dir):
    model = Wamdiff2Model.from_pretrained(qwen_dir, fields={"block_size": 8})
    assert model.fields.block_size == 8 and model.sources["block_size"] == "override"
    assert model.sources["mask_token_id"] == "Qwen3-VL convention"


def test_sharded_bf16_checkpoint_loads_with_its_weights(tmp_path):
    ck = write_qwen3_vl(tmp_path / "sharded", dtype=torch.bfloat16, max_shard_size="8MB")
    index = json.loads((ck / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) >= 2 and not (ck / "model.safetensors").exists()
    model = Wamdiff2Model.from_pretrained(ck)
    from safetensors import safe_open

    for shard in shards:
        with safe_open(str(ck / shard), framework="pt") as f:
            for key in f.keys():
                saved = f.get_tensor(key)
                assert saved.dtype == torch.bfloat16
                assert torch.equal(model.hf.state_dict()[key], saved.float()), key
    bf16 = Wamdiff2Model.from_pretrained(ck, dtype=torch.bfloat16)
    assert next(bf16.hf.parameters()).dtype == torch.bfloat16
