"""Each commit rule commits what it promises, on hand-made confidences."""
import torch

from wamdiff2_core.decoding.config import COMMIT_RULES
from wamdiff2_core.decoding.remasking import (commit_mask, confidence_rank,
                                              low_confidence_dynamic, transfer_schedule)

CONF = torch.tensor([[0.95, 0.20, 0.91, 0.50, 0.99, 0.30]])


def test_dynamic_commits_everything_above_threshold():
    masked = torch.tensor([[True, True, True, True, False, True]])
    got = commit_mask("low_confidence_dynamic", CONF, masked, 1, False, 0.9)
    # 0.99 is above the threshold but already committed (not masked)
    assert got.tolist() == [[True, False, True, False, False, False]]


def test_dynamic_commits_at_least_the_most_confident_one():
    masked = torch.tensor([[False, True, False, True, False, True]])
    got = commit_mask("low_confidence_dynamic", CONF, masked, 1, False, 0.9)
    assert got.tolist() == [[False, False, False, True, False, False]]


def test_static_commits_the_quota_of_most_confident():
    masked = torch.ones(1, 6, dtype=torch.bool)
    got = commit_mask("low_confidence_static", CONF, masked, 2, False, 0.9)
    assert got.tolist() == [[True, False, False, False, True, False]]


def test_budget_commits_above_threshold_and_at_least_the_quota():
    masked = torch.tensor([[True, True, True, True, False, True]])
    # above the threshold: 0.95 and 0.91 (more than the quota of 1)
    got = commit_mask("low_confidence_budget", CONF, masked, 1, False, 0.9)
    assert got.tolist() == [[True, False, True, False, False, False]]
    # a quota of 3: the two confident ones and the next most confident (0.50)
    got = commit_mask("low_confidence_budget", CONF, masked, 3, False, 0.9)
    assert got.tolist() == [[True, False, True, True, False, False]]
    # nothing confident: exactly the quota, most confident first
    masked = torch.tensor([[False, True, False, True, False, True]])
    got = commit_mask("low_confidence_budget", CONF, masked, 2, False, 0.9)
    assert got.tolist() == [[False, False, False, True, False, True]]


def test_leftmost_commits_above_threshold_and_at_least_the_leftmost_quota():
    masked = torch.tensor([[False, True, True, True, False, True]])
    # above the threshold: 0.91 (position 2); the quota of 2 adds the leftmost masked
    # position (1, confidence 0.20) although 0.50 and 0.30 are more confident
    got = commit_mask("low_confidence_leftmost", CONF, masked, 2, False, 0.9)
    assert got.tolist() == [[False, True, True, False, False, False]]
    # nothing confident: exactly the quota, leftmost first
    masked = torch.tensor([[False, True, False, True, False, True]])
    got = commit_mask("low_confidence_leftmost", CONF, masked, 2, False, 0.9)
    assert got.tolist() == [[False, True, False, True, False, False]]


def test_frontier_commits_above_threshold_and_the_left_edge_of_every_masked_run():
    masked = torch.tensor([[False, True, True, True, False, True]])
    # runs of masked positions: 1-3 and 5; their left edges are 1 and 5 (0.20, 0.30);
    # 2 is above the threshold; 3 is unsure with a masked left neighbour: it waits
    got = commit_mask("low_confidence_frontier", CONF, masked, 1, False, 0.9)
    assert got.tolist() == [[False, True, True, False, False, True]]
    # the whole block masked: its first position is the only left edge
    masked = torch.ones(1, 6, dtype=torch.bool)
    low = torch.full((1, 6), 0.5)
    got = commit_mask("low_confidence_frontier", low, masked, 3, False, 0.9)
    assert got.tolist() == [[True, False, False, False, False, False]]
    # the quota plays no part
    assert torch.equal(commit_mask("low_confidence_frontier", low, masked, 6, False, 0.9), got)


def test_frontier_never_commits_two_unsure_neighbours_in_one_step():
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        conf = torch.rand(4, 12, generator=g)
        masked = torch.rand(4, 12, generator=g) < 0.7
        got = commit_mask("low_confidence_frontier", conf, masked, 1, False, 0.9)
        unsure = got & (conf < 0.9)
        assert not (unsure[:, 1:] & masked[:, :-1]).any()      # an unsure pick's left was settled
        assert (got.any(-1) == masked.any(-1)).all()            # progress whenever anything is masked


def test_sequential_commits_leftmost_masked():
    masked = torch.tensor([[False, True, True, False, True, True]])
    got = commit_mask("sequential", CONF, masked, 2, False, 0.9)
    assert got.tolist() == [[False, True, True, False, False, False]]


def test_last_step_commits_every_masked_position():
    masked = torch.tensor([[True, True, False, True, True, True]])
    for rule in COMMIT_RULES:
        got = commit_mask(rule, CONF, masked, 1, True, 0.9)
        assert torch.equal(got, masked), rule


def test_rules_are_per_row():
    conf = torch.tensor([[0.1, 0.2], [0.95, 0.96]])
    masked = torch.ones(2, 2, dtype=torch.bool)
    got = commit_mask("low_confidence_dynamic", conf, masked, 1, False, 0.9)
    assert got.tolist() == [[False, True], [True, True]]


def test_transfer_schedule_spreads_the_block_over_the_budget():
    assert transfer_schedule(32, 8) == [4] * 8
    assert transfer_schedule(10, 4) == [3, 3, 2, 2]
    assert transfer_schedule(4, 10) == [1, 1, 1, 1]
    for k, s in [(32, 5), (7, 3), (1, 1)]:
        assert sum(transfer_schedule(k, s)) == k


def test_dynamic_top_pick_is_rank_zero_with_ties():
    """The dynamic rule's argmax pick is ``confidence_rank``'s rank 0, ties to the left."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        conf = torch.randint(0, 4, (3, 8), generator=g).float() / 4     # many ties
        masked = torch.rand(3, 8, generator=g) < 0.6
        got = low_confidence_dynamic(conf, masked, 1, False, 2.0)     # threshold never met
        want = masked & (confidence_rank(conf, masked) == 0)
        assert torch.equal(got, want)


def test_unsettled_keeps_masked_positions_before_the_first_end_of_answer():
    from wamdiff2_core.decoding.remasking import unsettled
    m, e = 9, 2                                   # mask id, end-of-answer id
    x = torch.tensor([[5, m, e, m, m, 7],         # a mask before the end: unsettled there
                      [5, 6, e, m, e, m],         # nothing masked before the first end
                      [m, 5, m, 6, 7, m],         # no end at all: every mask counts
                      [e, m, m, m, m, m]])        # ends at once
    assert unsettled(x, m, e).tolist() == [
        [False, True, False, False, False, False],
        [False] * 6,
        [True, False, True, False, False, True],
        [False] * 6]
