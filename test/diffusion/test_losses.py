"""JSD / KL / masked CE against hand computations; the teacher receives no gradient."""
import math

import numpy as np
import pytest
import torch

from wamdiff2_core.diffusion.losses import distill_loss, divergence, masked_ce


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _kl(p, q):
    return float(sum(pi * math.log(pi / qi) for pi, qi in zip(p, q)))


T_LOGITS = np.array([2.0, 0.5, -1.0, 0.0])
S_LOGITS = np.array([0.3, 1.2, 0.1, -0.7])


@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_jsd_beta_equals_hand_computation(tau):
    p, q = _softmax(T_LOGITS / tau), _softmax(S_LOGITS / tau)
    for beta in (0.5, 0.2, 0.9):
        m = beta * p + (1 - beta) * q
        want = (beta * _kl(p, m) + (1 - beta) * _kl(q, m)) * tau ** 2
        got = divergence("jsd", torch.tensor(T_LOGITS), torch.tensor(S_LOGITS), tau, beta)
        assert float(got) == pytest.approx(want, rel=1e-5)


def test_jsd_half_is_symmetric():
    a = divergence("jsd", torch.tensor(T_LOGITS), torch.tensor(S_LOGITS), 1.0, 0.5)
    b = divergence("jsd", torch.tensor(S_LOGITS), torch.tensor(T_LOGITS), 1.0, 0.5)
    assert float(a) == pytest.approx(float(b), rel=1e-6) and float(a) > 0


@pytest.mark.parametrize("tau", [1.0, 3.0])
def test_forward_and_reverse_kl_equal_hand_computation(tau):
    p, q = _softmax(T_LOGITS / tau), _softmax(S_LOGITS / tau)
    fwd = divergence("forward_kl", torch.tensor(T_LOGITS), torch.tensor(S_LOGITS), tau)
    rev = divergence("reverse_kl", torch.tensor(T_LOGITS), torch.tensor(S_LOGITS), tau)
    assert float(fwd) == pytest.approx(_kl(p, q) * tau ** 2, rel=1e-5)
    assert float(rev) == pytest.approx(_kl(q, p) * tau ** 2, rel=1e-5)
    assert float(fwd) != pytest.approx(float(rev), rel=1e-3)


def test_divergences_vanish_for_equal_distributions():
    x = torch.tensor(T_LOGITS)
    for name in ("jsd", "forward_kl", "reverse_kl"):
        assert abs(float(divergence(name, x, x.clone()))) < 1e-6


def test_unknown_divergence_names_itself():
    with pytest.raises(ValueError, match="'tv'"):
        divergence("tv", torch.zeros(3), torch.zeros(3))


def test_masked_ce_counts_masked_positions_only_weighted_and_normalised():
    logits = torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[1, 2, 3, 4], [0, 0, 1, 1]])
    masked = torch.tensor([[True, False, True, False], [False, False, False, True]])
    weight = torch.tensor([[2.0, 2.0, 4.0, 4.0], [1.0, 1.0, 1.0, 1.0]])
    lengths = torch.tensor([4, 2])
    got = masked_ce(logits, targets, masked, weight, lengths)
    logp = torch.log_softmax(logits, -1)
    want0 = (-logp[0, 0, 1] * 2 - logp[0, 2, 3] * 4) / 4
    want1 = (-logp[1, 3, 1] * 1) / 2
    torch.testing.assert_close(got, torch.stack([want0, want1]))


def test_distill_loss_mixes_ce_and_divergence_and_detaches_the_teacher():
    g = torch.Generator().manual_seed(1)
    student = torch.randn(1, 3, 6, generator=g, requires_grad=True)
    teacher = torch.randn(1, 3, 6, generator=g, requires_grad=True)
    targets = torch.tensor([[1, 2, 3]])
    masked = torch.tensor([[True, True, False]])
    weight = torch.tensor([[1.0, 3.0, 1.0]])
    lengths = torch.tensor([3])
    loss, ce, d = distill_loss(student, teacher, targets, masked, weight, lengths, lam=0.3,
                               temperature=2.0)
    d_pos = divergence("jsd", teacher, student, 2.0, 0.5)[0]
    torch.testing.assert_close(d, ((d_pos[0] + 3 * d_pos[1]) / 3).reshape(1))
    torch.testing.assert_close(loss, 0.7 * ce + 0.3 * d)
    loss.sum().backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None
