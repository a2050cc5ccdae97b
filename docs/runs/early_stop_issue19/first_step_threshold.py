"""Scratch (not shipped): the frontier rule with no threshold commits on a block's first step.

At 0.95 a block's first step commits the far waypoints' integer parts from the prompt alone
(docs/decoding.md, "What the threshold trades"). This variant lets the first step commit only
the frontier (the block's first position); every later step is the frontier rule as shipped.
It replaces the rule by name for one `wamdiff2` command line:

    python first_step_threshold.py {orig|nofirst} bench decode --no-constrained --repeats 1 \
        --data data/val3000/quarter.json --samples 24
"""
import sys

import torch

from wamdiff2_core.decoding import remasking


def frontier_no_first_step_threshold(confidence, masked, quota, last, threshold):
    settled = torch.cat([torch.ones_like(masked[..., :1]), ~masked[..., :-1]], -1)
    first_step = masked.all(-1, keepdim=True)         # nothing in the block is committed yet
    return masked & (((confidence >= threshold) & ~first_step) | settled | last)


if sys.argv[1] == "nofirst":
    remasking.COMMIT_RULE_FNS["low_confidence_frontier"] = frontier_no_first_step_threshold
from wamdiff2_core.apps.cli import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
