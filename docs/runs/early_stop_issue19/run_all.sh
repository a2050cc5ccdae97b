#!/usr/bin/env bash
# The decoding figures re-measured after the early stop (28787c0), in one series on an idle
# machine; each output file is named after its command. Run from the repository root:
#   bash docs/runs/early_stop_issue19/run_all.sh
# (data/test2000, data/val3000: wamdiff2 data generate --out data/test2000 --episodes 12
#  --seed 2000, and --seed 3000; quarter.json cut as the model card's)
set -u
D=docs/runs/early_stop_issue19
W=.venv/bin/wamdiff2
for i in 1 2 3; do $W bench decode > $D/bench_noargs_run$i.txt 2>/dev/null; done
for t in 0.95 0.97 0.99; do
  $W bench decode --no-constrained --repeats 1 --commit-rule low_confidence_frontier --threshold $t \
    > $D/bench_threshold_$t.txt 2>/dev/null
  $W bench decode --no-constrained --repeats 1 --commit-rule low_confidence_frontier --threshold $t \
    --data data/val3000/quarter.json --samples 24 > $D/bench_val3000_threshold_$t.txt 2>/dev/null
done
$W bench decode --data data/test2000/quarter.json --threads 1 --samples 24 --repeats 2 \
  > $D/bench_test2000_24_1thread.txt 2>/dev/null
$W bench decode --data data/val3000/quarter.json --threads 1 --samples 24 --repeats 2 \
  > $D/bench_val3000_24_1thread.txt 2>/dev/null
$W bench decode --samples 48 --repeats 1 > $D/bench_48.txt 2>/dev/null
$W demo > $D/demo.txt 2>&1
$W bag eval wamdiff2_ros/assets/sample.mcap --out /tmp/planned.mcap --report $D/bag_eval_report.json \
  --threads 1 > $D/bag_eval.txt 2>&1
echo finished > $D/.done
