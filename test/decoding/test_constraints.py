"""The constrained block step on random logits: the set algebra against a plain-Python
oracle, every finished answer a word of its language (random small regular languages and
each task's language), for every commit rule, block 1/4/32, batch 1/4, both backends, and
the reference and fast steps giving the same tokens."""
import random

import pytest
import torch
from constraint_fuzz import (EOA, MASK, as_sets, decode_blocks, in_language, oracle_ok,
                             oracle_sets, random_language)

from wamdiff2_core.decoding.config import COMMIT_RULES, DecodeConfig
from wamdiff2_core.decoding.constraints import sets, step
from wamdiff2_core.decoding.constraints.automaton import LanguageError
from wamdiff2_core.decoding.constraints.compile import (compile_language, compile_tokens,
                                                        token_bytes)
from wamdiff2_core.decoding.constraints.session import automaton_for
from wamdiff2_core.model.tokenizer import tiny_tokenizer
from wamdiff2_core.tasks.languages import (AnswerLanguage, detection_language,
                                           planning_language, qa_language)

RULES = list(COMMIT_RULES)
STEPS: list[int] = []


@pytest.mark.parametrize("seed", range(40))
def test_sets_match_the_oracle(seed):
    """Forward, backward and allowed sets, the one-sweep pair, the feasible run of picks and
    the left-to-right fill, on random blocks of random languages."""
    rng = random.Random(seed)
    lang, vocab, host = random_language(rng, min_tokens=1)
    auto = host.on_device("cpu", max(vocab) + 1)
    k = rng.choice([1, 3, 6])
    offset, max_new = rng.randint(0, 4), rng.randint(host.min_tokens, host.min_tokens + 9)
    entry_states = {rng.randrange(host.n_states) for _ in range(rng.randint(1, 3))}
    x = [rng.choice([MASK, MASK, *vocab, EOA]) for _ in range(k)]
    ok = oracle_ok(host, offset, k, max_new)
    fwd, bwd, allowed = oracle_sets(host, entry_states, x, ok)

    entry = torch.zeros(1, auto.n_states)
    entry[0, list(entry_states)] = 1.0
    xt = torch.tensor([x])
    okt = sets.budget_ok(auto, offset, k, max_new)
    assert as_sets(okt) == ok
    cand = sets.edge_candidates(auto, xt, MASK)
    f, b = sets.block_sets(auto, entry, cand, okt)
    assert as_sets(f[0]) == fwd and as_sets(b[0]) == bwd
    assert torch.equal(f, sets.forward_sets(auto, entry, cand, okt))
    assert torch.equal(b, sets.backward_sets(auto, cand, okt))
    cols = sets.allowed_tokens(auto, f, b)[0]
    got = [{int(auto.col_tok[c]) for c in torch.nonzero(row).flatten()} for row in cols]
    assert got == allowed

    # picks: random allowed tokens at random masked positions; the run the fast step keeps
    # is the longest prefix of picks that a plain search finds completable
    picks = torch.tensor([[x[i] == MASK and bool(allowed[i]) and rng.random() < 0.7
                           for i in range(k)]])
    tokens = torch.tensor([[rng.choice(sorted(allowed[i])) if allowed[i] else EOA
                            for i in range(k)]])
    picked = torch.where(picks, tokens, xt)
    keep = sets.feasible_prefix(sets.forward_sets(auto, entry, sets.edge_candidates(
        auto, picked, MASK), okt), b)
    if bwd[0] & entry_states:                         # the block as it is is completable
        best = max(p for p in range(k + 1) if oracle_sets(
            host, entry_states, [int(t) if picks[0, i] and i < p else x[i]
                                 for i, t in enumerate(tokens[0])], ok)[1][0] & entry_states)
        first_pick = next((i for i in range(k) if picks[0, i]), k)
        assert int(keep[0].sum()) == best and best > first_pick or not picks.any()

        # the fill commits a completable block whose tokens each maximise the score among
        # those allowed after the fills before it
        scores = torch.randn(1, k, auto.n_cols)
        filled, exit_set = sets.fill_left_to_right(auto, entry, xt, MASK, b, scores)
        plain = step._fill_plain(auto, entry, xt, MASK, okt, scores)
        assert torch.equal(filled, plain)
        assert MASK not in filled.tolist()[0]
        assert as_sets(exit_set)[0] == oracle_sets(host, entry_states, filled.tolist()[0],
                                                   ok)[0][-1]
        assert as_sets(exit_set)[0]


def test_jointly_infeasible_picks_commit_a_completable_subset():
    """"ab" or "ba": each of a@0 and a@1 is allowed alone, together they leave no word."""
    lang = AnswerLanguage("ab|ba", "ab|ba")
    host = compile_tokens(lang, {2: b"a", 3: b"b"}, EOA)
    auto = host.on_device("cpu", 4)
    x = torch.tensor([[MASK, MASK, MASK]])
    logits = torch.full((1, 3, 4), -5.0)
    logits[0, 0, 2] = logits[0, 1, 2] = 9.0               # both positions sure of "a"
    logits[0, 2, EOA] = 9.0
    ok = sets.budget_ok(auto, 0, 3, 3)
    entry = auto.state_set(1, auto.start)
    cols = sets.column_logits(auto, logits)
    for fn in (step.reference_step, lambda *a: step.fast_step(*a)[0]):
        out = fn(auto, entry, x, cols, MASK, ok, "low_confidence_dynamic", 1, False, 0.9,
                 0.0, None)
        # the picks left of the conflict: a@0, not a@1 (nor the sure eoa right of it)
        assert out.tolist() == [[2, MASK, MASK]]
    # the budget-end fill completes it as "ab", although the logits still prefer "a"
    for fn in (step.reference_step, lambda *a: step.fast_step(*a)[0]):
        out = fn(auto, entry, torch.tensor([[2, MASK, MASK]]), cols, MASK, ok,
                 "low_confidence_dynamic", 1, True, 0.9, 0.0, None)
        assert out.tolist() == [[2, 3, EOA]]


def test_a_language_longer_than_the_budget_is_refused_up_front(tiny_diffusion):
    with pytest.raises(LanguageError, match=r"shortest planning<=40m/s answer takes 80 tokens"):
        automaton_for(tiny_diffusion, planning_language(), 64)
    host = compile_language(qa_language(["yes"]), tiny_tokenizer(), 2)
    assert host.min_tokens == 2                                   # "yes" + end of answer
    with pytest.raises(LanguageError, match="cannot be written"):
        compile_tokens(AnswerLanguage("x", "é"), {2: b"a"}, EOA)


CASES = [(rule, k, rows, backend) for rule in RULES for k in (1, 4, 32) for rows in (1, 4)
         for backend in ("reference", "fast")]


@pytest.mark.parametrize("rule,k,rows,backend", CASES)
def test_random_languages_always_finish_in_the_language(rule, k, rows, backend):
    """40 random languages per case (10 at block 32), random logits: every answer is a
    word (thousands of constrained steps over the cases)."""
    rng = random.Random(f"{rule}-{k}-{rows}")
    total, cases = 0, 40 if k < 32 else 10
    for case in range(cases):
        lang, vocab, host = random_language(rng)
        auto = host.on_device("cpu", max(vocab) + 1)
        max_new = rng.randint(host.min_tokens, host.min_tokens + 2 * k + 3)
        cfg = DecodeConfig(commit_rule=rule, threshold=rng.choice([0.5, 0.9]),
                           steps_per_block=rng.choice([None, 1, 2, 3]),
                           max_new_tokens=max_new, temperature=rng.choice([0.0, 0.0, 1.0]))
        answers, steps = decode_blocks(auto, rows, k, max_new, cfg, backend, case,
                                       max(vocab) + 1)
        total += steps * rows
        for ids in answers:
            assert in_language(lang, vocab, ids, max_new), (lang.regex, ids)
    assert total >= cases
    STEPS.append(total)


@pytest.mark.parametrize("k", [1, 4, 32])
@pytest.mark.parametrize("rule", RULES)
def test_reference_and_fast_steps_give_the_same_tokens(rule, k):
    rng = random.Random(k)
    for case in range(12 if k < 32 else 5):
        lang, vocab, host = random_language(rng)
        auto = host.on_device("cpu", max(vocab) + 1)
        max_new = rng.randint(host.min_tokens, host.min_tokens + 2 * k + 3)
        cfg = DecodeConfig(commit_rule=rule, steps_per_block=rng.choice([None, 2]),
                           max_new_tokens=max_new, temperature=rng.choice([0.0, 0.7]))
        got = [decode_blocks(auto, 4, k, max_new, cfg, b, case, max(vocab) + 1)[0]
               for b in ("reference", "fast")]
        assert got[0] == got[1]


TASK_LANGUAGES = [planning_language(), detection_language(max_boxes=3),
                  detection_language(), qa_language(["yes", "no", "there is no such lane"]),
                  qa_language()]


@pytest.mark.parametrize("lang", TASK_LANGUAGES, ids=lambda lang: lang.name)
@pytest.mark.parametrize("k", [4, 32])
def test_task_languages_on_random_logits(lang, k):
    """Each task's language over the project BPE, random logits, both backends agreeing:
    the answers decode to text the task's writer could have produced."""
    tok = tiny_tokenizer()
    eoa, mask = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|mask|>")
    host = compile_language(lang, tok, eoa)
    auto = host.on_device("cpu", len(tok))
    vocab = token_bytes(tok)
    max_new = max(host.min_tokens + 8, 96)
    for rule in ("low_confidence_dynamic", "low_confidence_leftmost"):
        cfg = DecodeConfig(commit_rule=rule, steps_per_block=8 if k == 32 else None,
                           max_new_tokens=max_new)
        ref, fast = (decode_blocks(auto, 4, k, max_new, cfg, backend, 5, len(tok), eoa,
                                   mask)[0] for backend in ("reference", "fast"))
        assert ref == fast
        for ids in ref:
            assert in_language(lang, vocab, ids, max_new, eoa), ids


def test_the_fuzz_ran_thousands_of_steps():
    """Guards the fuzz above (when it ran in this session): thousands of steps in all."""
    if len(STEPS) < len(CASES):
        pytest.skip("the random-language fuzz did not run in this session")
    print(f"random-language fuzz: {sum(STEPS)} constrained row-steps")
    assert sum(STEPS) >= 5000
