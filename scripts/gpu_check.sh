#!/usr/bin/env bash
# The GPU check (docs/decoding.md, "On a GPU"): one call on a lent GPU machine gives every
# figure that matters. Each step runs under its own budget (`timeout`, seconds), printed at the
# start with their total, which stays at most 480 s, so that one H100 finishes within 8
# minutes from a bare machine, wheel install included. A step whose budget runs out is killed
# and a line says what it skipped; the next step starts on time. Default steps, in order:
#   wheels   install .whl/ (made here by scripts/gpu_wheels.sh) into /tmp/site
#   tests    a short, essential subset of the GPU decoder tests (QUICK_TESTS below): CUDA
#            graphs equal the reference decoder (commit rules, fused and unfused commits, a
#            shifted model, AR, constrained); exact mode equals its verifier (tiny models, and
#            the bundled model against its AR teacher)
#   decode   the 2B shape (untrained, bf16, batch 1, block 32, CUDA graphs, SDPA): AR step and
#            block step latency; tokens/s of AR, diffusion and exact decoding at their own
#            tokens per forward, and projected at the bundled model's (BUNDLED_TPF,
#            BUNDLED_EXACT_TPF: docs/benchmarks.md)
#   predict  `wamdiff2 predict` on the 2B shape at batch 1 (the first 16 records), 32 and 128
#            (128 synthetic planning records): samples/s, tokens/s, answers against batch 1's
#   node     image -> Path through planner_node on the GPU against the bare planner in the
#            same run (scripts/gpu_node_step.py); where rclpy is missing, as on a lent machine,
#            the bare planner alone and the reason
#   fsdp     FSDP2 training steps of the 2B shape with activation checkpointing
#            (scripts/fsdp_gpu_step.py): step time, tokens/s, MFU, peak memory against
#            `wamdiff2 memory-plan`'s figure
# Extra steps, run only when STEPS names them: fi-tests, fi-decode (FlashInfer: its tests, and
# the decode step with FlashInfer attention, where FlashInfer is installed: its wheels do not
# fit in what a lent machine's call may carry), compile-tests, compile-decode (torch.compile
# then CUDA graphs), tests-all (every GPU decoder test without FlashInfer or torch.compile).
#
#   bash scripts/gpu_check.sh                      # the default steps
#   STEPS="decode fsdp" bash scripts/gpu_check.sh  # some steps; B_DECODE=200 another budget
#   GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh  # the same steps on the tiny preset, CPU
#                                                  # (timeouts: budget x GPU_CHECK_DRY_SLACK=3;
#                                                  # ROS and the simulator hidden, as there)
#   GPU_CHECK_ROS=0 bash scripts/gpu_check.sh      # the node step times the bare planner only
#
# Results: $OUT/summary.json (device, driver, torch, each step's status, figures and raw
# output), $OUT/summary.md (the same as one table, to paste into docs/benchmarks.md) and
# $OUT/gpu_check.log (everything printed); three files whatever the steps, as a lent
# machine returns at most eight. Step outputs stay in $GPU_CHECK_WORK (default: a new /tmp
# folder). PYTHON picks the interpreter (default python3).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-gpu_out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
WORK=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$WORK" && : > "$WORK/steps.tsv" || exit 1
DRY=${GPU_CHECK_DRY_RUN:-0}
PY=${PYTHON:-python3}
LIMIT=480
DEFAULT_STEPS="wheels tests decode predict node fsdp"
STEPS=${STEPS:-$DEFAULT_STEPS}
BUNDLED_TPF=${BUNDLED_TPF:-7.64}            # the bundled model, unconstrained, fast decoder
BUNDLED_EXACT_TPF=${BUNDLED_EXACT_TPF:-5.40}  # the same in exact mode (drafts and verifies)
declare -A BUDGET=([wheels]=${B_WHEELS:-25} [tests]=${B_TESTS:-60} [decode]=${B_DECODE:-115}
                   [predict]=${B_PREDICT:-100} [node]=${B_NODE:-65} [fsdp]=${B_FSDP:-95}
                   [fi-tests]=${B_FI_TESTS:-150} [fi-decode]=${B_FI_DECODE:-120}
                   [compile-tests]=${B_COMPILE_TESTS:-150}
                   [compile-decode]=${B_COMPILE_DECODE:-300} [tests-all]=${B_TESTS_ALL:-300})
declare -A SKIPS=([wheels]="the wheel install: the image's own packages are used"
                  [tests]="the selected tests not yet run (see the log for those that ran)"
                  [decode]="the whole 2B decode report (latencies and tokens/s)"
                  [predict]="every batch size's figures (the report comes at the end)"
                  [node]="the node and bare-planner latencies"
                  [fsdp]="the training steps not yet run and the memory comparison"
                  [fi-tests]="the FlashInfer tests not yet run"
                  [fi-decode]="the FlashInfer decode report"
                  [compile-tests]="the compile-then-capture test"
                  [compile-decode]="the compile-graphs latencies"
                  [tests-all]="the GPU tests not yet run")
# The tests step: pytest node ids, so that a renamed test fails the CPU dry run (CI) instead
# of silently dropping out of the selection.
FAST=test/decoding/test_fast_gpu.py CONS=test/decoding/test_constrained_gpu.py
EXACT=test/decoding/test_exact_gpu.py
QUICK_TESTS=(
  "$FAST::test_graphs_equal_reference[low_confidence_dynamic-32-4-fused]"
  "$FAST::test_graphs_equal_reference[low_confidence_frontier-32-4-commit-pass]"
  "$FAST::test_graphs_equal_reference[low_confidence_static-4-1-fused]"
  "$FAST::test_shifted_graphs_equal_reference[low_confidence_frontier-32-fused]"
  "$FAST::test_ar_graphs_equal_reference[3]"
  "$CONS::test_constrained_graphs_equal_reference[low_confidence_frontier-32-4-graphs]"
  "$CONS::test_captured_constrained_steps_never_sync"
  "$EXACT::test_graphs_equal_reference_and_ar[free-3-fused]"
  "$EXACT::test_graphs_equal_reference_and_ar[constrained-1-commit-pass]"
  "$EXACT::test_graph_replays_equal_eager_runs"
  "$EXACT::test_bundled_model_on_a_gpu_answers_as_its_teacher[free]"
)

if [ "$DRY" = 1 ]; then      # the same steps, sized for the tiny preset on the CPU
  MODEL=(--preset tiny --device cpu --dtype float32)
  DECODE=(--block-size 4 --max-new-tokens 8 --samples 1 --latency-reps 1 --mode eager
          --latency-modes eager --image-size 64x48)
  PREDICT=(--records 4 --configs 1x1,1x2,1x4 --first-records 2 --image-size 64x48
           --block-size 4 --max-new-tokens 8 --no-constrained)
  NODE=(--frames 2 --size 64x48 --block-size 4 --max-new-tokens 8 --no-constrained)
  # the device's budgets are printed and checked; a CPU shared with other work gets longer
  SLACK=${GPU_CHECK_DRY_SLACK:-3}
  FSDP=(--preset tiny --pixels 16384 --steps 2 --image 320x180)
else
  MODEL=(--preset qwen3-vl-2b --device cuda --dtype bfloat16)
  DECODE=(--block-size 32 --max-new-tokens 64 --samples 2 --latency-reps 20 --mode graphs
          --latency-modes graphs)
  PREDICT=(--records 128 --configs 1x1,1x32,1x128 --first-records 16)
  NODE=(--frames 20 --size 640x360)
  [ "${GPU_CHECK_ROS:-1}" = 0 ] && NODE+=(--no-ros)
  FSDP=()
  SLACK=1
fi

record() {  # record NAME RC SECONDS [SKIP REASON]: one line of steps.tsv for the summary
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${BUDGET[$1]}" "${4:-}" >> "$WORK/steps.tsv"
}

run_step() {  # run_step NAME COMMAND...: stdout to WORK/NAME.out, stderr to WORK/NAME.err
  local name=$1 budget=${BUDGET[$1]} start=$SECONDS rc took
  shift
  echo "== $name (budget ${budget} s$([ "$SLACK" = 1 ] || echo ", x$SLACK in a dry run")): $*"
  timeout -k 10 $((budget * SLACK)) "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
  rc=$? took=$((SECONDS - start))
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "$name: SKIPPED after ${took} s, its budget ran out: skipped ${SKIPS[$name]}"
    record "$name" "$rc" "$took" "its budget of ${budget} s ran out: skipped ${SKIPS[$name]}"
  else
    echo "-- $name: exit $rc in ${took} s"
    record "$name" "$rc" "$took"
  fi
  [ $rc = 0 ] || tail -n 8 "$WORK/$name.err"
  return 0
}

wheels() {  # install .whl/ into /tmp/site, first on PYTHONPATH once installed
  if [ "$DRY" = 1 ]; then
    echo "wheels: skipped: dry run (the CPU's own environment)"
    record wheels 0 0 "dry run: the CPU's own environment, less what the device lacks"
  elif ! ls .whl/*.whl > /dev/null 2>&1; then
    echo "wheels: skipped: no .whl/ (scripts/gpu_wheels.sh makes it): the image's packages"
    record wheels 0 0 "no .whl/: the image's own packages"
  else
    ls .whl/*.whl | sed 's|^.whl/||' | tee "$WORK/wheels.txt"
    run_step wheels "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
  fi
}

tests() {  # tests NAME PYTEST-ARGS...
  local name=$1
  shift
  run_step "$name" "$PY" -m pytest -q -m gpu "$@"
  tail -n 3 "$WORK/$name.out"
}

decode() {  # decode NAME ARGS...: `bench decode` of the 2B shape (tiny in a dry run)
  local name=$1
  shift
  run_step "$name" "$PY" -m wamdiff2_core.cli bench decode "${MODEL[@]}" --batch 1 \
    --repeats 1 --no-constrained --tokens-per-forward "$BUNDLED_TPF" --json "${DECODE[@]}" "$@"
}

main() {
  local total=0 step
  for step in $STEPS; do
    [ -n "${BUDGET[$step]}" ] || { echo "unknown step '$step' (see the script's head)"; return 2; }
    total=$((total + BUDGET[$step]))
  done
  local what="steps: $STEPS"
  [ "$DRY" = 1 ] && what="$what (dry run: tiny preset, CPU)"
  echo "gpu_check: $(date -u +%FT%TZ), $what"
  for step in $STEPS; do printf '  budget %-15s %4d s\n' "$step" "${BUDGET[$step]}"; done
  echo "budget total: $total s (limit $LIMIT s)"
  [ $total -le $LIMIT ] || echo "WARNING: the budgets add up to more than $LIMIT s"
  [ "$SLACK" = 1 ] ||
    echo "dry run: each step's timeout is its budget x$SLACK (a CPU shared with other work)"
  export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
  # a dry run imports as the device does: no ROS, simulator or bag packages there
  [ "$DRY" = 1 ] && export PYTHONPATH=$PWD/scripts/gpu_dry_run:$PWD
  export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0}
  # a rerun without the wheels step on the same machine finds them installed already
  if [ "$DRY" != 1 ] && [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site:$PWD; fi
  for step in $STEPS; do
    case $step in
      wheels) wheels ;;
      tests) tests tests "${QUICK_TESTS[@]}" ;;
      decode) decode decode --attention sdpa --decode-mode all ;;
      predict) run_step predict "$PY" -m wamdiff2_core.cli bench predict --gpu "${MODEL[@]}" \
                 --json "${PREDICT[@]}" ;;
      node) run_step node "$PY" scripts/gpu_node_step.py "$WORK/node.json" "${MODEL[@]}" \
              "${NODE[@]}" ;;
      fsdp) run_step fsdp "$PY" scripts/fsdp_gpu_step.py "$WORK/fsdp" "${FSDP[@]}" ;;
      fi-tests) tests fi-tests test/decoding/test_fast_gpu.py -k flashinfer ;;
      fi-decode) decode fi-decode --attention flashinfer --decode-mode diffusion ;;
      compile-tests) tests compile-tests test/decoding -k compiled ;;
      compile-decode) decode compile-decode --attention sdpa --decode-mode diffusion \
                        --latency-modes graphs,compile-graphs ;;
      tests-all) tests tests-all test/decoding -k "not flashinfer and not compiled" ;;
    esac
  done
  local cmd="bash scripts/gpu_check.sh"
  [ "$STEPS" = "$DEFAULT_STEPS" ] || cmd="STEPS=\"$STEPS\" $cmd"
  [ "$DRY" = 1 ] && cmd="GPU_CHECK_DRY_RUN=1 $cmd"
  "$PY" scripts/gpu_summary.py "$WORK" "$OUT" --steps "$STEPS" --budget-total "$total" \
    --dry-run "$DRY" --bundled-tpf "$BUNDLED_TPF" --bundled-exact-tpf "$BUNDLED_EXACT_TPF" \
    --command "$cmd"
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
