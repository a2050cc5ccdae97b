"""Several images per prompt row and per batch: the processor lays each image out with its own
M-RoPE grid (as Qwen3-VL's get_rope_index does), a batched decode equals each row alone with
both decoders, and the model's answer depends on every image, not only the first."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig
from wamdiff2_core.model.prompt import prepare_prompt
from wamdiff2_core.planner import Planner, PlannerConfig

RIG = ("front", "left")


@pytest.fixture(scope="module")
def rig_model(tiny_diffusion):
    return tiny_diffusion.with_fields(cameras=RIG)


@pytest.fixture(scope="module")
def rows(camera_images):
    """Two prompts of different lengths, each with a front and a left image (the left one
    smaller, so the two images of a row have different grids)."""
    small = [im[:64, :64] for im in camera_images]
    prompts = [tasks.planning_prompt("left", (10.0, 0.2), (0.5, 0.0), cameras=RIG),
               tasks.qa_prompt("Is the left lane free of cars?", cameras=RIG)]
    images = [[camera_images[0], small[1]], [camera_images[2], small[3]]]
    return prompts, images


def image_spans(ids: torch.Tensor, pad_id: int) -> list[tuple[int, int]]:
    """(start, end) of each run of image pads in one row of ids (L,)."""
    spans, start = [], None
    for i, token in enumerate(ids.tolist() + [-1]):
        if token == pad_id and start is None:
            start = i
        elif token != pad_id and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_each_image_has_its_own_position_grid(rig_model, rows):
    prompts, images = rows
    proc = rig_model.processor
    batch = proc.encode_prompts(prompts[:1], images[:1])
    prompt = prepare_prompt(rig_model, batch, block_size=4)
    ids, pos = batch["input_ids"][0], prompt.positions[:, 0]              # (L,), (3, L)
    spans = image_spans(ids, proc.image_pad_id)
    grids = batch["image_grid_thw"] // torch.tensor([1, 2, 2])             # merged (t, h, w)
    assert len(spans) == 2 and grids[0].tolist() != grids[1].tolist()
    for (start, end), (t, h, w) in zip(spans, grids.tolist()):
        assert end - start == t * h * w
        before = int(pos[0, start - 1])                  # text position before the image
        span = pos[:, start:end] - (before + 1)                            # (3, n)
        rows_, cols = np.divmod(np.arange(h * w), w)
        assert span[0].tolist() == [0] * (h * w)                            # one frame
        assert span[1].tolist() == rows_.tolist() and span[2].tolist() == cols.tolist()
        after = pos[:, end]                              # <|vision_end|>: text resumes
        assert after.tolist() == [before + 1 + max(h, w)] * 3
    text = torch.ones_like(ids, dtype=torch.bool)
    for start, end in spans:
        text[start:end] = False
    assert torch.equal(pos[0, text], pos[1, text]) and torch.equal(pos[0, text], pos[2, text])


def test_a_batch_lays_out_each_row_as_alone(rig_model, rows):
    prompts, images = rows
    proc = rig_model.processor
    together = prepare_prompt(rig_model, proc.encode_prompts(prompts, images), 4)
    for i in range(2):
        alone = prepare_prompt(rig_model, proc.encode_prompts(prompts[i:i + 1],
                                                              images[i:i + 1]), 4)
        n = alone.length
        assert torch.equal(together.input_ids[i, -n:], alone.input_ids[0])
        assert torch.equal(together.positions[:, i, -n:], alone.positions[:, 0])
        assert int(together.answer_start[i]) == int(alone.answer_start[0])


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_batched_decode_equals_each_row_alone(rig_model, rows, backend):
    prompts, images = rows
    decode = DecodeConfig(block_size=4, max_new_tokens=12, constrained=False,
                          commit_rule="low_confidence_dynamic", threshold=0.9)
    planner = Planner(rig_model, PlannerConfig(decode, backend=backend))
    together, _ = planner.generate(prompts, images)
    assert together[0] != together[1]                 # two real, different answers
    alone = [planner.generate(prompts[i:i + 1], images[i:i + 1])[0][0] for i in range(2)]
    assert together == alone
    reference = Planner(rig_model, PlannerConfig(planner.decode, backend="reference"))
    assert reference.generate(prompts, images)[0] == together


def test_the_answer_depends_on_the_second_image(rig_model, rows):
    prompts, images = rows
    proc = rig_model.processor

    def last_logits(row_images):
        batch = proc.encode_prompts(prompts[:1], [row_images])
        prompt = prepare_prompt(rig_model, batch, block_size=4)
        with torch.no_grad():
            logits = rig_model.forward_logits(prompt.input_ids, prompt.prefill_mask(),
                                              prompt.positions, **prompt.vision)
        return logits[0, -1]                                                # (V,)

    base = last_logits(images[0])
    other_left = last_logits([images[0][0], 255 - images[0][1]])
    other_front = last_logits([255 - images[0][0], images[0][1]])
    assert not torch.allclose(base, other_left, atol=1e-5)
    assert not torch.allclose(base, other_front, atol=1e-5)


def test_a_wrong_image_count_is_refused_before_a_forward(rig_model, rows):
    prompts, images = rows
    with pytest.raises(ValueError, match="2 <image> placeholders but 1 images"):
        rig_model.processor.encode_prompts(prompts[:1], [images[0][:1]])


def test_the_planner_writes_its_models_cameras_and_checks_the_image_count(rig_model, rows):
    from wamdiff2_core.planner import Observation

    _, images = rows
    planner = Planner(rig_model, PlannerConfig(DecodeConfig(block_size=4, max_new_tokens=96,
                                                            steps_per_block=1)))
    assert planner.cameras == RIG
    observation = Observation(images=images[0], command="left", velocity=(8.0, 0.0))
    prompt = planner.planning_prompt(observation)
    assert tasks.prompt_cameras(prompt) == RIG
    result = planner.plan(observation)                    # constrained: a well-formed plan
    assert result.waypoints.shape == (8, 2)
    for bad in ([images[0][0]], images[0] * 2):
        with pytest.raises(ValueError, match=r"reads 2 camera image\(s\) per request "
                                             r"\(front, left\), got"):
            planner.plan(Observation(images=bad, command="left"))
    with pytest.raises(ValueError, match="reads 2 camera"):
        planner.detect(images[0][:1])
