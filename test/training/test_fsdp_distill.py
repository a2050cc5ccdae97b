"""Distillation at scale on this CPU: a tiny student under FSDP2 (two processes) with the
`small` teacher sharded the same way gives the losses of one process with the teacher
replicated, on an on-policy step (the student decodes its own answers, each process at its
own pace) and on an ordinary JSD step."""
from __future__ import annotations

import pytest
from conftest import tiny_overrides
from torchrun import run_train

from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training.metrics import read_metrics


@pytest.fixture(scope="module")
def small_teacher(tmp_path_factory):
    """An (untrained) block-4 diffusion model of the `small` preset."""
    path = tmp_path_factory.mktemp("teacher") / "small"
    Wamdiff2Model.from_preset("small", paradigm="diffusion", block_size=4,
                              seed=1).save_pretrained(path)
    return path


def test_sharded_teacher_and_on_policy_steps_match_one_process(toy_data, small_teacher,
                                                               tmp_path):
    common = ["train.steps=2", "data.limit=8", "train.threads=1", "train.global_batch=4",
              "train.micro_batch=2", "output.log_every=1", "distill.teacher_block_size=4",
              f"distill.teacher={small_teacher}", "distill.on_policy_every=2",
              "distill.on_policy_steps_per_block=1",
              "distill.divergence=jsd"]

    def run(out, *extra, nproc=1):
        proc = run_train(tiny_overrides(toy_data, out, "distill", block=4) + common
                         + list(extra), nproc=nproc, config="distill_block.yaml")
        return proc, {int(r["step"]): r for r in read_metrics(out)}

    proc, two = run(tmp_path / "two", "train.strategy=fsdp",
                    "distill.teacher_placement=sharded", nproc=2)
    assert "[fsdp, teacher sharded]" in proc.stdout
    proc, one = run(tmp_path / "one", "distill.teacher_placement=replicated")
    assert "[none, teacher replicated]" in proc.stdout
    assert two[1]["loss"] == pytest.approx(two[1]["kd"])       # step 0: on-policy, KD only
    assert two[2]["ce"] > 0
    for step in (1, 2):
        for key in ("loss", "ce", "kd"):
            assert two[step][key] == pytest.approx(one[step][key], abs=1e-5), (step, key)
    gap = max(abs(two[s][k] - one[s][k]) for s in (1, 2) for k in ("loss", "ce", "kd"))
    print(f"\ndistillation, FSDP2 + sharded teacher vs 1 process + replicated: max |loss, "
          f"ce, kd difference| {gap:.1e} (step 1 on-policy)")
