"""Per-block stratified mask ratios and masking."""
import torch

from wamdiff2_core.diffusion.noise import corrupt, sample_generators, stratified_ratios

MASK = 99


def test_stratified_ratios_are_evenly_spaced_in_eps_one():
    for seed in range(20):
        t = stratified_ratios(4, 1e-3, torch.Generator().manual_seed(seed))
        assert t.shape == (4,) and bool((t > 1e-3).all()) and bool((t <= 1).all())
        gaps = torch.sort(t).values.diff()
        torch.testing.assert_close(gaps, torch.full((3,), (1 - 1e-3) / 4), atol=1e-5, rtol=0)


def test_one_ratio_per_block_padding_untouched_and_weights_one_over_t():
    x0 = torch.arange(1, 25).reshape(2, 12)
    lengths = torch.tensor([12, 8])
    c = corrupt(x0, lengths, 4, MASK, sample_generators(0, 0, [0, 1]))
    for row, n in enumerate(lengths.tolist()):
        t = c.t[row, :n].reshape(-1, 4)
        assert bool((t == t[:, :1]).all())                       # one t per block
        assert bool((c.weight[row, :n] == 1 / c.t[row, :n]).all())
    assert not c.masked[1, 8:].any() and bool((c.weight[1, 8:] == 0).all())
    assert bool((c.xt[c.masked] == MASK).all())
    assert bool((c.xt[~c.masked] == x0[~c.masked]).all())


def test_every_row_has_a_masked_position_even_at_tiny_ratios():
    x0 = torch.ones(64, 4, dtype=torch.long)
    c = corrupt(x0, torch.full((64,), 4), 4, MASK, sample_generators(3, 0, range(64)),
                eps=1e-6)
    assert bool(c.masked.any(-1).all())


def test_masking_depends_only_on_seed_step_and_sample_position():
    x0 = torch.arange(40).reshape(2, 20) + 1
    a = corrupt(x0, torch.tensor([20, 20]), 4, MASK, sample_generators(5, 7, [10, 11]))
    b = corrupt(x0[1:], torch.tensor([20]), 4, MASK, sample_generators(5, 7, [11]))
    assert torch.equal(a.xt[1:], b.xt)
    c = corrupt(x0, torch.tensor([20, 20]), 4, MASK, sample_generators(5, 8, [10, 11]))
    assert not torch.equal(a.masked, c.masked)


def test_mask_rate_follows_t():
    x0 = torch.ones(400, 32, dtype=torch.long)
    c = corrupt(x0, torch.full((400,), 32), 32, MASK, sample_generators(0, 0, range(400)))
    frac = c.masked.float().mean(-1)
    assert abs(float((frac - c.t[:, 0]).mean())) < 0.02
