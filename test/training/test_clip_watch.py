"""The trainer says when gradient clipping binds on nearly every step of a length-bucketed
diffusion run (ClipWatch), and stays quiet otherwise."""
import pytest

from wamdiff2_core.training.config import build_recipe
from wamdiff2_core.training.engine import ClipWatch, train
from conftest import tiny_overrides


def recipe(objective="diffusion", clip=1.0, bucket=64, grouped=True):
    return build_recipe({}, [f"objective={objective}",
                             f"model.paradigm={'ar' if objective == 'ar' else 'diffusion'}",
                             f"model.block_size={1 if objective == 'ar' else 32}",
                             f"optim.grad_clip={clip}", f"data.length_bucket={bucket}",
                             f"data.group_by_task={str(grouped).lower()}"])


def notes(watch, norms):
    return [(i, n) for i, n in enumerate(map(watch.observe, norms)) if n]


def test_warns_once_after_the_window_when_the_clip_always_binds():
    watch = ClipWatch(recipe(), window=10)
    found = notes(watch, [90.0] * 9 + [0.5] + [90.0] * 30)
    assert [i for i, _ in found] == [9]                     # once, at the window's end
    text = found[0][1]
    assert "9 of the first 10 steps" in text and "data.length_bucket=64" in text
    assert "optim.grad_clip=1" in text and "docs/training.md" in text


def test_quiet_when_the_clip_binds_on_fewer_steps():
    assert notes(ClipWatch(recipe(), window=10), [90.0] * 8 + [0.5] * 2 + [90.0] * 20) == []


@pytest.mark.parametrize("kw", [dict(objective="ar"), dict(clip=0.0), dict(bucket=0),
                                dict(grouped=False, bucket=0)])
def test_quiet_where_the_weighting_does_not_depend_on_the_answers(kw):
    assert notes(ClipWatch(recipe(**kw), window=5), [90.0] * 20) == []


def test_a_training_run_reports_it(tmp_path, toy_data):
    said = []
    bound = tiny_overrides(toy_data, tmp_path / "a", block=4) + [
        "data.length_bucket=8", "optim.grad_clip=1e-12", "train.steps=3"]
    train(build_recipe({}, bound), log=lambda *a: None, warn=said.append)
    assert len(said) == 1 and "on 3 of the first 3 steps" in said[0], said
    said.clear()
    free = tiny_overrides(toy_data, tmp_path / "b", block=4) + [
        "data.length_bucket=8", "optim.grad_clip=0", "train.steps=3"]
    train(build_recipe({}, free), log=lambda *a: None, warn=said.append)
    assert said == []
