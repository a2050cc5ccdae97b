"""Exact mode's draft settings on held-out frames, side by side (how the defaults in
``wamdiff2_core/decoding/verify.py`` were chosen: on seed 2000, judged on seed 3000).

For each ``ExactConfig`` of the grid, over the planning (or other) records of a generated
data set, one record at a time: the CPU speed against the verifier's own optimised AR
decoder in the same run (the decoders take turns on every record), tokens accepted per
verify, tokens per forward (draft + verify: the GPU projection's speed-up where a forward of
a block costs one AR step) and whether every answer equals the verifier's greedy answer.

    wamdiff2 data generate --out val2000 --episodes 8 --seed 2000 --frames 4
    python scripts/exact_sweep.py val2000 --grid draft_steps=1,2,4 min_tail=1,4 \\
        verify_width=8,16,32

``--verifier self`` verifies with the drafter's own weights read next-token; ``--constrained``
enforces each task's answer language.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

from wamdiff2_core import tasks
from wamdiff2_core.decoding.config import DecodeConfig, ExactConfig
from wamdiff2_core.decoding.engine import DecodingEngine
from wamdiff2_core.decoding.fast_exact import fast_exact_decode
from wamdiff2_core.decoding.verify import load_verifier
from wamdiff2_core.evaluation.open_loop import load_image
from wamdiff2_core.planner import load_model

LANGUAGES = {"planning": tasks.planning_language, "detection": tasks.detection_language,
             "qa": tasks.qa_language}


def grid(items: list[str]) -> list[ExactConfig]:
    """``NAME=V,V ...`` over ExactConfig's fields -> every combination."""
    axes = {}
    for item in items:
        name, _, values = item.partition("=")
        axes[name] = [int(v) for v in values.split(",")]
    return [ExactConfig(**dict(zip(axes, combo))) for combo in itertools.product(*axes.values())]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="generated data set (directory holding train.json)")
    parser.add_argument("--checkpoint", default=None, help="drafter (default: the bundle)")
    parser.add_argument("--verifier", default=None,
                        help="DIR or self (default: CHECKPOINT/ar_teacher, else self)")
    parser.add_argument("--tasks", default="planning")
    parser.add_argument("--limit", type=int, default=24, help="records per task")
    parser.add_argument("--grid", nargs="*", default=["draft_steps=1,2"])
    parser.add_argument("--constrained", action="store_true")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    model = load_model(args.checkpoint)
    verifier = load_verifier(model, args.verifier)
    ar, drafter = DecodingEngine(verifier), DecodingEngine(model)
    v_runner = DecodingEngine(verifier).runner
    root = Path(args.data)
    records = json.loads((root / "train.json").read_text())
    configs = grid(args.grid)
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens, constrained=args.constrained)
    for task in args.tasks.split(","):
        mine = [r for r in records if r.get("task") == task][:args.limit]
        language = LANGUAGES[task]() if args.constrained else None
        auto = drafter.automaton(language, cfg.max_new_tokens) if language else None
        batches = [model.processor.encode_prompts([tasks.record_prompt_and_answer(r)[0]],
                                                  [[load_image(r, root)]]) for r in mine]
        rows = {c: [0, 0.0, 0, 0, True] for c in configs}   # tokens, ms, verifies, fwd, same
        ar_tokens, ar_ms, ar_fwd = 0, 0.0, 0
        for b in batches[:1]:                                       # warm-up (states)
            ar.decode(b, cfg, language)
            for c in configs:
                fast_exact_decode(drafter.runner, v_runner, b, cfg, c, auto)
        for _ in range(args.repeats):
            for b in batches:
                want = ar.decode(b, cfg, language)
                ar_tokens, ar_ms = ar_tokens + want.stats.tokens, ar_ms + want.stats.decode_ms
                ar_fwd += want.stats.forwards
                for c in configs:
                    out = fast_exact_decode(drafter.runner, v_runner, b, cfg, c, auto)
                    row, st = rows[c], out.stats
                    row[0] += st.tokens
                    row[1] += st.decode_ms
                    row[2] += st.verify_forwards
                    row[3] += st.forwards
                    row[4] &= out.sequences == want.sequences
        ar_speed = ar_tokens / ar_ms * 1e3
        print(f"{task}: {len(batches)} records, AR {ar_speed:.1f} tokens/s "
              f"({'constrained' if args.constrained else 'free'}, {args.repeats} pass(es))")
        # the answers are the AR decoder's, so on a device where a forward of a block costs an
        # AR step the speed-up is the ratio of forwards
        print("draft_steps min_tail verify_width | x AR (this CPU) | tokens/verify | "
              "tokens/forward | GPU projection x AR | answers = AR")
        for c, (tok, ms, ver, fwd, same) in rows.items():
            print(f"{c.draft_steps!s:>11} {c.min_tail!s:>8} {c.verify_width!s:>12} | "
                  f"{tok / ms * 1e3 / ar_speed:15.2f} | {tok / ver:13.2f} | "
                  f"{tok / fwd:14.2f} | {ar_fwd / fwd:19.2f} | {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
