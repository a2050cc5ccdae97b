"""The fast decoder's probabilities, not only its tokens, against the reference decoder's
(issue 14): the full softmax each denoising step chooses from, step by step. On this CPU, for
one prompt, they are the same bits with the fused commit and without it (the fused two-block
step runs row-wise products and each block's own attention call). A left-padded batch is
not bitwise: the reference attends over pad keys (masked), the fast decoder's packed cache has
none, so a softmax sums a different number of zeros; measured up to 4e-9, bounded here by
1e-8."""
import json

import pytest
import torch
from PIL import Image

from wamdiff2_core import tasks
from wamdiff2_core.decoding import fast, reference
from wamdiff2_core.decoding.config import DecodeConfig, FastConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.types import bundled_checkpoint_path

PADDED_BOUND = 1e-8


class StepProbabilities:
    """Records the softmax each decoder's token choice sees (wraps ``choose_tokens`` in the
    decoder modules: the real function runs, its input is kept)."""

    def __init__(self, monkeypatch):
        self.steps: list[torch.Tensor] = []
        real = reference.choose_tokens

        def spy(logits, mask_id, temperature, generator=None):
            probs = logits.float().clone()
            probs[..., mask_id] = float("-inf")
            self.steps.append(torch.softmax(probs, -1))
            return real(logits, mask_id, temperature, generator)

        for module in (reference, fast):
            monkeypatch.setattr(module, "choose_tokens", spy)

    def run(self, fn) -> list[torch.Tensor]:
        self.steps = []
        fn()
        return self.steps


def _compare(spy, model, batch, cfg, exact: bool) -> float:
    want = spy.run(lambda: reference.decode(model, batch, cfg))
    worst = 0.0
    for fuse in (True, False):
        engine = DecodingEngine(model, "fast", FastConfig(fuse_commit=fuse))
        got = spy.run(lambda: engine.decode(batch, cfg))
        assert len(got) == len(want) > 0
        for step, (a, b) in enumerate(zip(want, got)):
            if exact:
                assert torch.equal(a, b), (fuse, step, float((a - b).abs().max()))
            worst = max(worst, float((a - b).abs().max()))
    return worst


@pytest.mark.skipif(bundled_checkpoint_path() is None, reason="needs the bundled model")
@pytest.mark.parametrize("cfg", [DecodeConfig(),
                                 DecodeConfig(commit_rule="low_confidence_leftmost",
                                              steps_per_block=8, threshold=0.95)])
def test_trained_model_probabilities_are_the_references_bits(monkeypatch, cfg):
    from bundle_answers import FIXTURE, RECORDS

    from wamdiff2_core.planner import load_model

    model = load_model(None)
    spy = StepProbabilities(monkeypatch)
    for record in json.loads(RECORDS.read_text())[:3]:        # detection, planning, qa
        prompt, _ = tasks.record_prompt_and_answer(record)
        image = Image.open(FIXTURE / record["image"][0]).convert("RGB")
        batch = model.processor.encode_prompts([prompt], [[image]])
        assert _compare(spy, model, batch, cfg, exact=True) == 0.0


@pytest.mark.parametrize("rule", ["low_confidence_dynamic", "low_confidence_static"])
def test_random_model_probabilities_one_prompt_exact_padded_batch_bounded(
        monkeypatch, tiny_diffusion, camera_images, prompts, rule):
    spy = StepProbabilities(monkeypatch)
    cfg = DecodeConfig(commit_rule=rule, steps_per_block=2, max_new_tokens=12)
    p = tiny_diffusion.processor
    one = p.encode_prompts(prompts[:1], [camera_images[:1]])
    assert _compare(spy, tiny_diffusion, one, cfg, exact=True) == 0.0
    padded = p.encode_prompts(prompts[:2], [camera_images[:1], camera_images[1:2]])
    assert not padded["valid"].all()                              # a row is left-padded
    assert _compare(spy, tiny_diffusion, padded, cfg, exact=False) <= PADDED_BOUND
