"""Every stage trains: a few steps on a tiny model lower the loss on a fixed batch, and the
distillation teacher stays frozen."""
import pytest
import torch

from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training.config import build_recipe
from wamdiff2_core.training.engine import Trainer, train
from conftest import tiny_overrides


def fixed_batch_loss(trainer: Trainer, step: int = 1) -> float:
    """Loss of the trainer's objective on the first global batch with the noise of ``step``
    (step 1: not an on-policy step in these tests)."""
    batch = trainer.batches.make(trainer.order.indices(0), trainer.order.positions(0))
    with torch.no_grad():
        return float(trainer.objective(trainer.model.hf, batch, step).loss.mean())


def run_steps(trainer: Trainer, n: int) -> list[dict]:
    return [trainer.train_step(s) for s in range(n)]


def trainer_for(tmp_path, overrides) -> Trainer:
    # data.limit=4 with a global batch of 4: every step sees the same four samples.
    return Trainer(build_recipe({}, overrides + ["data.limit=4", "train.steps=50",
                                                 "data.group_by_task=false"]),
                   log=lambda *a: None)


@pytest.mark.parametrize("objective,block", [("ar", 1), ("diffusion", 4), ("diffusion", 32)])
def test_stage_lowers_the_loss_on_a_fixed_batch(tmp_path, toy_data, objective, block):
    trainer = trainer_for(tmp_path, tiny_overrides(toy_data, tmp_path, objective, block))
    before = fixed_batch_loss(trainer)
    steps = run_steps(trainer, 6)
    after = fixed_batch_loss(trainer)
    assert all(torch.isfinite(torch.tensor(s["loss"])) for s in steps)
    assert after < 0.8 * before, (before, after)


@pytest.fixture(scope="module")
def block4_teacher(tmp_path_factory, toy_data, ar_checkpoint):
    """A block-4 diffusion teacher made from the AR checkpoint (one training step)."""
    out = tmp_path_factory.mktemp("teacher")
    return train(build_recipe({}, tiny_overrides(toy_data, out, block=4)
                              + [f"model.init={ar_checkpoint}", "train.steps=1"]),
                 log=lambda *a: None)


@pytest.mark.parametrize("divergence,on_policy", [("jsd", 0), ("reverse_kl", 2)])
def test_distillation_lowers_the_loss_and_never_touches_the_teacher(
        tmp_path, toy_data, block4_teacher, divergence, on_policy):
    teacher_dir = block4_teacher
    trainer = trainer_for(tmp_path / "s", tiny_overrides(toy_data, tmp_path / "s", "distill",
                                                         block=8, init=str(teacher_dir)) + [
        f"distill.teacher={teacher_dir}", "distill.teacher_block_size=4",
        f"distill.divergence={divergence}", f"distill.on_policy_every={on_policy}"])
    teacher = trainer.teacher
    assert teacher.fields.block_size == 4 and trainer.objective.teacher_block == 4
    assert trainer.model.fields.block_size == 8
    snapshot = {k: v.clone() for k, v in teacher.hf.state_dict().items()}
    before = fixed_batch_loss(trainer)
    steps = run_steps(trainer, 6)
    after = fixed_batch_loss(trainer)
    assert after < before, (before, after)
    assert all(s["kd"] >= 0 for s in steps)
    if on_policy:   # on-policy steps drop the CE term (its target is the student's output)
        assert steps[0]["loss"] == pytest.approx(steps[0]["kd"])
        assert steps[1]["loss"] != pytest.approx(steps[1]["kd"])
    assert all(p.grad is None and not p.requires_grad for p in teacher.hf.parameters())
    for k, v in teacher.hf.state_dict().items():
        assert torch.equal(v, snapshot[k]), k


def test_ar_teacher_view_for_the_cross_scale_ablation(tmp_path, toy_data, ar_checkpoint):
    trainer = trainer_for(tmp_path, tiny_overrides(toy_data, tmp_path, "distill", block=4,
                                                   init=str(ar_checkpoint)) + [
        f"distill.teacher={ar_checkpoint}", "distill.teacher_block_size=0"])
    assert trainer.teacher.fields.paradigm == "ar" and trainer.objective.teacher_block == 1
    steps = run_steps(trainer, 2)
    assert all(s["kd"] > 0 for s in steps)


def test_final_checkpoint_loads_as_a_planner_model(tmp_path, toy_data):
    out = train(build_recipe({}, tiny_overrides(toy_data, tmp_path, block=8)
                             + ["train.steps=1"]), log=lambda *a: None)
    model = Wamdiff2Model.from_pretrained(out)
    assert model.fields.paradigm == "diffusion" and model.fields.block_size == 8
    assert (out / "training_recipe.yaml").exists()
    assert not list(out.parent.glob(".tmp-*"))
