"""Temperature sampling: Gumbel-max draws from softmax(logits / T), finite noise, and the
confidences the commit rules see are the model's own probabilities at every temperature."""
import math

import pytest
import torch

from wamdiff2_core.decoding.constraints import sets
from wamdiff2_core.decoding.sampling import choose_tokens, gumbel_noise


def test_gumbel_noise_is_finite_and_standard():
    noise = gumbel_noise(torch.Size([200_000]), torch.Generator().manual_seed(0), "cpu")
    assert torch.isfinite(noise).all()
    # a standard Gumbel has mean Euler's gamma and variance pi^2 / 6
    assert float(noise.mean()) == pytest.approx(0.5772, abs=0.01)
    assert float(noise.var()) == pytest.approx(math.pi ** 2 / 6, rel=0.02)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_choose_tokens_samples_the_tempered_distribution(temperature):
    probs = torch.tensor([0.6, 0.3, 0.1, 0.0])            # token 3 is the mask: never drawn
    logits = torch.log(probs.clamp_min(1e-30)).expand(1, 40_000, 4).clone()
    gen = torch.Generator().manual_seed(1)
    tokens, conf = choose_tokens(logits, 3, temperature, gen)
    counts = torch.bincount(tokens.flatten(), minlength=4).float() / tokens.numel()
    tempered = probs[:3] ** (1 / temperature)
    tempered = tempered / tempered.sum()
    assert counts[3] == 0
    assert torch.allclose(counts[:3], tempered, atol=0.01)
    # the confidence is the untempered probability of the drawn token
    assert torch.allclose(conf, probs[tokens], atol=1e-6)


def test_low_temperature_is_greedy_with_the_same_confidences():
    logits = torch.randn(3, 7, 11, generator=torch.Generator().manual_seed(2))
    greedy, greedy_conf = choose_tokens(logits.clone(), 10, 0.0)
    cold, cold_conf = choose_tokens(logits.clone(), 10, 1e-4, torch.Generator().manual_seed(3))
    assert torch.equal(greedy, cold)
    assert torch.allclose(greedy_conf, cold_conf)


class _Auto:
    col_tok = torch.arange(4)


def test_constrained_choice_samples_only_allowed_tokens():
    col_logits = torch.log(torch.tensor([0.5, 0.2, 0.2, 0.1])).expand(1, 20_000, 4).clone()
    allowed = torch.tensor([True, True, False, True]).expand(1, 20_000, 4)
    tokens, conf, _ = sets.choose(_Auto(), col_logits, allowed, 1.0,
                                  torch.Generator().manual_seed(4))
    counts = torch.bincount(tokens.flatten(), minlength=4).float() / tokens.numel()
    expected = torch.tensor([0.5, 0.2, 0.0, 0.1]) / 0.8
    assert torch.allclose(counts, expected, atol=0.015)
    assert torch.allclose(conf, expected[tokens], atol=1e-6)
