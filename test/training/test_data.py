"""Data order and batches: deterministic, task-grouped, sharded without overlap."""
import pytest

from wamdiff2_core.model.modeling import Wamdiff2Model
from wamdiff2_core.training.config import RecipeError
from wamdiff2_core.training.data import BatchMaker, GlobalOrder, load_samples, shard


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
    assert maker.dropped == 0
    short = BatchMaker(samples, model.processor, 8, 16)
    assert short.dropped > 0 and all(len(a) <= 16 for a in short.answer_ids)


def test_bad_data_is_a_recipe_error(tmp_path, toy_data):
    with pytest.raises(RecipeError, match="no answered records of tasks"):
        load_samples(toy_data, tasks=("lidar",))
    (tmp_path / "train.json").write_text('[{"id": 1, "image": ["x.png"], "conversations": '
                                         '[{"from": "human", "value": "<image> hi"}, '
                                         '{"from": "gpt", "value": "yo"}]}]')
    with pytest.raises(RecipeError, match="missing image"):
        load_samples(tmp_path)
