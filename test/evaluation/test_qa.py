"""QA exact match after normalisation."""
from wamdiff2_core.evaluation.qa import exact_match, in_answer_set, normalise_answer


def test_normalisation_strips_lowercases_and_collapses_spaces():
    assert normalise_answer("  Two   Cars\n") == "two cars"


def test_exact_match_ignores_case_and_spacing_but_not_punctuation():
    assert exact_match(" YES ", "yes")
    assert not exact_match("yes.", "yes")
    assert not exact_match("no", "yes")


def test_in_answer_set():
    assert in_answer_set("Left", ["left", "right", "straight"])
    assert not in_answer_set("up", ["left", "right", "straight"])
