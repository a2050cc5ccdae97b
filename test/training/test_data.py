"""Data order and batches: deterministic, task-grouped, sharded without overlap."""
import dataclasses

import numpy as np
import pytest
import torch

from wamdiff2_core.image_files import open_rgb
from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training.config import RecipeError
from wamdiff2_core.training.data import (
    BatchMaker, GlobalOrder, group_keys, key_task, load_samples, shard,
)


def test_task_grouped_batches_cover_the_epoch_one_task_each():
    keys = ["planning"] * 10 + ["qa"] * 7 + ["detection"] * 5
    order = GlobalOrder(len(keys), 4, seed=3, group_by=keys)
    per_epoch = order.batches_per_epoch()
    assert per_epoch == 3 + 2 + 2
    seen = set()
    for step in range(per_epoch):
        batch = order.indices(step)
        assert len(batch) == 4 and len({keys[i] for i in batch}) == 1
        seen.update(batch)
    assert seen == set(range(len(keys)))
    again = GlobalOrder(len(keys), 4, seed=3, group_by=keys)
    assert [again.indices(s) for s in range(9)] == [order.indices(s) for s in range(9)]
    assert order.indices(per_epoch) != order.indices(0) or order.indices(
        per_epoch + 1) != order.indices(1)                       # a new epoch reshuffles


def test_task_weights_set_each_tasks_share_of_the_steps():
    keys = ["planning"] * 40 + ["detection"] * 40 + ["qa"] * 40
    plain = GlobalOrder(len(keys), 4, seed=3, group_by=keys)
    same = GlobalOrder(len(keys), 4, seed=3, group_by=keys,
                       weights={"planning": 1.0, "qa": 1})
    assert [same.indices(s) for s in range(40)] == [plain.indices(s) for s in range(40)]
    weighted = GlobalOrder(len(keys), 4, seed=3, group_by=keys,
                           weights={"detection": 2.5, "qa": 0.5})
    assert weighted.batches_per_epoch() == 10 + 25 + 5
    mix = weighted.mix()
    assert mix == {"detection": 25 / 40, "planning": 10 / 40, "qa": 5 / 40}
    epoch = [i for s in range(40) for i in weighted.indices(s)]
    detection = [i for i in epoch if keys[i] == "detection"]
    assert set(detection) == {i for i, k in enumerate(keys) if k == "detection"}
    assert len({i for i in epoch if keys[i] == "qa"}) == 20     # half the qa records ...
    qa_next = {i for s in range(40, 80) for i in weighted.indices(s) if keys[i] == "qa"}
    assert qa_next != {i for i in epoch if keys[i] == "qa"}      # ... another half next epoch
    with pytest.raises(ValueError, match="must be > 0"):
        GlobalOrder(len(keys), 4, seed=3, group_by=keys, weights={"qa": 0})
    with pytest.raises(ValueError, match="group_by"):
        GlobalOrder(len(keys), 4, seed=3, weights={"qa": 2})


def test_length_buckets_keep_long_and_short_answers_apart(toy_data):
    samples = load_samples(toy_data)
    ids = [[0] * n for n in (2, 30, 40, 2, 70, 95)] * 3
    samples = (samples * 2)[:len(ids)]
    assert group_keys(samples, ids) == [s.task for s in samples]
    keys = group_keys(samples, ids, 32)
    assert keys[:6] == [(samples[i].task, b) for i, b in enumerate((0, 0, 1, 0, 2, 2))]
    assert {key_task(k) for k in keys} == {s.task for s in samples}
    order = GlobalOrder(len(keys), 2, seed=0, group_by=keys,
                        weights={k: 2.0 for k in keys if key_task(k) == "detection"})
    for step in range(order.batches_per_epoch()):
        assert len({keys[i] for i in order.indices(step)}) == 1
    assert sum(order.mix().values()) == pytest.approx(1.0)


def test_ungrouped_order_and_positions():
    order = GlobalOrder(10, 4, seed=0)
    epoch = order.indices(0) + order.indices(1) + order.indices(2)
    assert set(epoch) == set(range(10)) and epoch[10:] == epoch[:2]   # tail filled
    assert order.positions(2) == [8, 9, 10, 11]


def test_shard_gives_each_process_its_slice_of_every_micro_step():
    items = list(range(8))
    assert shard(items, 0, 2, 2) == [[0, 1], [4, 5]]
    assert shard(items, 1, 2, 2) == [[2, 3], [6, 7]]
    assert shard(items, 0, 1, 8) == [items]


def test_samples_and_batches(toy_data):
    samples = load_samples(toy_data)
    assert {s.task for s in samples} == {"planning", "detection", "qa"}
    model = Wamdiff2Model.from_preset("tiny", block_size=8)
    maker = BatchMaker(samples, model.processor, 8, 128)
    batch = maker.make([0, 2], [10, 11])
    assert batch.answers.shape[1] % 8 == 0
    assert batch.lengths.tolist() == [len(maker.answer_ids[0]), len(maker.answer_ids[2])]
    eoa = model.processor.eoa_id
    row = batch.answers[1, :batch.lengths[1]].tolist()
    text = samples[2].answer
    assert model.processor.decode_answer(row) == text and row[-1] == eoa
    assert maker.dropped == 0 and maker.dropped_by_task == {}
    short = BatchMaker(samples, model.processor, 8, 16)
    assert short.dropped > 0 and all(len(a) <= 16 for a in short.answer_ids)
    assert sum(short.dropped_by_task.values()) == short.dropped


def test_bad_data_is_a_recipe_error(tmp_path, toy_data):
    with pytest.raises(RecipeError, match="no answered records of tasks"):
        load_samples(toy_data, tasks=("lidar",))
    (tmp_path / "train.json").write_text('[{"id": 1, "image": ["x.png"], "conversations": '
                                         '[{"from": "human", "value": "<image> hi"}, '
                                         '{"from": "gpt", "value": "yo"}]}]')
    with pytest.raises(RecipeError, match="missing image"):
        load_samples(tmp_path)


def test_task_loss_norm_weighs_every_answer_token_of_a_task_alike(toy_data):
    """With loss_norm "task" a row's normaliser is its task's mean answer length, so the
    first token of a 2-token answer weighs what the first token of a 200-token one does."""
    samples = load_samples(toy_data)
    model = Wamdiff2Model.from_preset("tiny", block_size=1)
    own = BatchMaker(samples, model.processor, 1, 128)
    task = BatchMaker(samples, model.processor, 1, 128, loss_norm="task")
    batch = own.make([0, 1, 2], [0, 1, 2])
    assert torch.equal(batch.loss_norm, batch.lengths.float())
    for i, s in enumerate(task.samples):
        same = [len(a) for a, t in zip(task.answer_ids, task.samples) if t.task == s.task]
        assert task.norms[i] == pytest.approx(sum(same) / len(same))
    rows = task.make(list(range(len(samples))), list(range(len(samples))))
    assert rows.loss_norm.tolist() == pytest.approx(task.norms)
    with pytest.raises(ValueError, match="loss_norm"):
        BatchMaker(samples, model.processor, 1, 128, loss_norm="tokens")


def test_lateral_status_dropout_rewrites_only_planning_prompts(toy_data):
    """data.lateral_status_dropout: a planning prompt loses its lateral velocity and
    acceleration (written 0.00, the template otherwise byte for byte); other tasks' prompts
    and the answers stay as they are; the draw depends on (seed, position) only."""
    from wamdiff2_core.tasks import planning_prompt
    from wamdiff2_core.training.data import lateral_dropped, without_lateral_status

    turning = planning_prompt("left", velocity=(7.31, 0.55), acceleration=(0.2, -4.1))
    assert without_lateral_status(turning) == planning_prompt(
        "left", velocity=(7.31, 0.0), acceleration=(0.2, 0.0))
    assert without_lateral_status("<image> Describe the scene.") == "<image> Describe the scene."
    draws = [lateral_dropped(5, pos, 0.5) for pos in range(2000)]
    assert 0.45 < sum(draws) / len(draws) < 0.55
    assert draws == [lateral_dropped(5, pos, 0.5) for pos in range(2000)]
    assert draws != [lateral_dropped(6, pos, 0.5) for pos in range(2000)]
    assert not any(lateral_dropped(5, pos, 0.0) for pos in range(200))
    assert all(lateral_dropped(5, pos, 1.0) for pos in range(200))

    samples = load_samples(toy_data)
    planning = [i for i, s in enumerate(samples) if s.task == "planning"]
    samples[planning[0]] = dataclasses.replace(samples[planning[0]], prompt=turning)
    model = Wamdiff2Model.from_preset("tiny", block_size=8)
    rows = list(range(len(samples)))
    plain = BatchMaker(samples, model.processor, 8, 128).make(rows, rows)
    dropped = BatchMaker(samples, model.processor, 8, 128, lateral_status_dropout=1.0,
                         seed=5).make(rows, rows)
    want = model.processor.encode_prompts(
        [without_lateral_status(s.prompt) if s.task == "planning" else s.prompt
         for s in samples], [[np.asarray(open_rgb(p)) for p in s.images] for s in samples])
    assert torch.equal(dropped.prompt["input_ids"], want["input_ids"])
    assert torch.equal(dropped.answers, plain.answers)
    changed = [i for i in rows if not torch.equal(dropped.prompt["input_ids"][i],
                                                  plain.prompt["input_ids"][i])]
    assert planning[0] in changed and set(changed) <= set(planning)
