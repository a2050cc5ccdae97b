"""Block-causal masks against a hand-written reference, exhaustively over small sizes."""
import itertools

import torch

from wamdiff2_core.model import masks


def hand_reference(pad: int, prompt: int, answer: int, bs: int) -> torch.Tensor:
    """The training mask of [pad | prompt | x0 | xt], written position by position from the
    semantics (not from the library's type/block rule)."""
    n = pad + prompt + 2 * answer
    ref = torch.zeros(n, n, dtype=torch.bool)

    def kind(i):
        if i < pad:
            return "pad", None
        if i < pad + prompt:
            return "prefix", (i - pad) // bs          # prompt chunk
        if i < pad + prompt + answer:
            return "clean", (i - pad - prompt) // bs  # answer block
        return "noisy", (i - pad - prompt - answer) // bs

    for i, j in itertools.product(range(n), range(n)):
        qi, qb = kind(i)
        kj, kb = kind(j)
        if qi == "pad":
            ref[i, j] = i == j
        elif kj == "pad":
            ref[i, j] = False
        elif qi == "prefix":
            ref[i, j] = kj == "prefix" and kb <= qb
        elif qi == "clean":  # a commit pass: the prompt, earlier blocks, its own block
            ref[i, j] = kj == "prefix" or (kj == "clean" and kb <= qb)
        else:                # denoising: the prompt, committed earlier blocks, its own noise
            ref[i, j] = kj == "prefix" or (kj == "clean" and kb < qb) or (
                kj == "noisy" and kb == qb)
    return ref


def test_training_mask_matches_hand_reference_exhaustively():
    for bs in (1, 2, 3, 4):
        for prompt in range(1, 10):
            for n_blocks in (1, 2, 3):
                for pad in (0, 1, 3):
                    answer = n_blocks * bs
                    valid = torch.tensor([[False] * pad + [True] * prompt])
                    types, blocks = masks.training_layout(valid, answer, bs)
                    got = masks.attention_mask(types, blocks, types, blocks,
                                               diagonal_offset=0)[0, 0]
                    want = hand_reference(pad, prompt, answer, bs)
                    assert torch.equal(got, want), (bs, prompt, n_blocks, pad)


def test_prompt_chunks_start_at_first_real_token():
    valid = torch.tensor([[False, False, True, True, True], [True, True, True, True, True]])
    types, blocks = masks.prompt_layout(valid, 2)
    assert blocks.tolist() == [[-1, -1, 0, 0, 1], [0, 0, 1, 1, 2]]
    assert masks.num_prompt_blocks(valid, 2).tolist() == [2, 3]


def test_block_size_one_is_causal():
    valid = torch.ones(1, 5, dtype=torch.bool)
    types, blocks = masks.training_layout(valid, 0 + 3, 1)
    m = masks.attention_mask(types, blocks, types, blocks, diagonal_offset=0)[0, 0]
    clean = m[:8, :8]                      # prefix + x0 only
    assert torch.equal(clean, torch.tril(torch.ones(8, 8, dtype=torch.bool)))


def test_answer_length_must_be_whole_blocks():
    import pytest
    with pytest.raises(ValueError, match="multiple"):
        masks.training_layout(torch.ones(1, 3, dtype=torch.bool), 5, 4)
