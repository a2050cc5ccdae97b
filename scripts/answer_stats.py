"""Answer lengths per task, empty detection answers, box sizes and batch padding of a data set.

    python scripts/answer_stats.py DATA_DIR [--checkpoint DIR] [--block 32] [--bucket 64]

Tokens are counted with the checkpoint's tokenizer (default: the bundled model's), answer +
end-of-answer, padded to whole blocks of ``--block`` where stated. The figures behind
docs/training.md's "Task mix" (in docs/history.md) were printed by this script.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def _lengths(records, processor, block: int) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    for rec in records:
        ids = processor.encode_answer(rec["conversations"][1]["value"], block)
        out.setdefault(rec["task"], []).append(len(ids))
    return {task: np.array(v) for task, v in out.items()}


def _batch_width(processor, samples, block: int, bucket: int) -> tuple[float, float]:
    from wamdiff2_core.training.data import BatchMaker, GlobalOrder, group_keys

    maker = BatchMaker(samples, processor, block, 10 ** 6)
    keys = group_keys(maker.samples, maker.answer_ids, bucket)
    order = GlobalOrder(len(keys), 8, 0, keys)
    widths = [max(len(maker.answer_ids[i]) for i in order.indices(s))
              for s in range(order.batches_per_epoch())]
    return float(np.mean(widths)), float(np.mean([len(a) for a in maker.answer_ids]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--checkpoint", default=None, help="default: the bundled model")
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--bucket", type=int, default=64)
    args = parser.parse_args()

    from wamdiff2_core.planner import load_model
    from wamdiff2_core.training.data import load_samples

    processor = load_model(args.checkpoint).processor
    records = json.loads((Path(args.data) / "train.json").read_text())
    for block in (1, args.block):
        print(f"answer tokens + end-of-answer, padded to blocks of {block}:")
        for task, n in sorted(_lengths(records, processor, block).items()):
            print(f"  {task:10s} {len(n):6d} records: mean {n.mean():6.1f}, median "
                  f"{np.median(n):4.0f}, 90% {np.percentile(n, 90):4.0f}, max {n.max():4d}; "
                  f"> 128: {np.mean(n > 128):.1%}")
    det = [r for r in records if r["task"] == "detection"]
    boxes = [len(r["meta"]["boxes"]) for r in det]
    print(f"detection: {np.mean(boxes):.2f} boxes per frame, {np.mean(np.equal(boxes, 0)):.1%} "
          f"empty answers, boxes per frame {np.bincount(boxes).tolist()}")
    xyxy = np.array([b["bbox"] for r in det for b in r["meta"]["boxes"]])
    width, height = det[0]["meta"]["image_size"]
    w, h = xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]
    yc = (xyxy[:, 1] + xyxy[:, 3]) / 2 / height
    print(f"boxes on {width}x{height}: width median {np.median(w):.0f} px, height median "
          f"{np.median(h):.0f} px; narrower than 16 px {np.mean(w < 16):.1%}; area < 32^2 "
          f"{np.mean(w * h < 32 ** 2):.1%}; centre y / height 5-95%: "
          f"{np.percentile(yc, 5):.2f}-{np.percentile(yc, 95):.2f}")
    grid = processor.process_images([np.zeros((height, width, 3), np.uint8)])["image_grid_thw"]
    t, gh, gw = grid[0].tolist()
    print(f"the processor resizes to {gw * 16}x{gh * 16}: {gh * gw // 4} image tokens")
    from wamdiff2_core.tasks import record_prompt_and_answer

    for task in sorted({r["task"] for r in records}):
        rec = next(r for r in records if r["task"] == task)
        text = processor.chat_text(record_prompt_and_answer(rec)[0], [gh * gw // 4])
        print(f"  {task} prompt: {len(processor.tokenizer.encode(text))} tokens")
    samples = [s for s in load_samples(args.data) if s.task == "detection"]
    for block in (1, args.block):
        for bucket in (0, args.bucket):
            wide, mean = _batch_width(processor, samples, block, bucket)
            print(f"detection batches of 8, block {block}, length bucket {bucket}: "
                  f"{wide:.0f} tokens wide on average (mean answer {mean:.0f})")


if __name__ == "__main__":
    main()
