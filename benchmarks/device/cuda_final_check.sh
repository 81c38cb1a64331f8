#!/usr/bin/env bash
# Issue 12 on the H200 with every CUDA change of a session merged, in one call of about 3.5 minutes:
#
#   bash benchmarks/device/cuda_final_check.sh        (from the repository root, $PYLIB carried)
#
# Phases, each capped (DEADLINE, default 230 s, for the whole check):
#   build    cuda_common.sh: CUDA build (sm_90); meanwhile the random-weight real-shape models of the issue's
#            table: smollm2-135m Q4_0, llama3-8b Q4_0 and llama3-8b Q4_K (BENCH_MODELS)
#   ops      all of tests/cuda/test_cuda_ops.py and tests/cuda/test_cuda_prefill_attention.py
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b Q4_K cell (CPU parity, batch/chunk invariance)
#   bench    benchmarks/bench_cuda.py on the three models: the issue's table (decode 1/2/4, pp512, bandwidth,
#            GPU memory for 4 slots x 4096)
#   gemm     benchmarks/bench_cuda_gemm.py, Q4_0 at 512 and 64 rows (us per llama3-8b matrix)
#   attn     benchmarks/bench_cuda_attention.py --prefill-only (512-row prefill attention per layer)
#   profile  benchmarks/bench_cuda_step_profile.py on llama3-8b Q4_0: GPU time per kernel, 1 and 4 rows, prefill
# Then EXTRA_PHASES (a command string run last, if set) for opt-in experiments.
# Results: $OUT/results.txt, ops.xml, engine.xml; non-zero exit if the build or a test failed.
export BENCH_MODELS=${BENCH_MODELS:-smollm2-135m-Q4_0 llama3-8b-Q4_0 llama3-8b-Q4_K}
DEADLINE=${DEADLINE:-230}
. "$(dirname "$0")/cuda_common.sh"
log "ops tests"
pytest_phase "OPS TESTS" 45 ops.xml tests/cuda/test_cuda_ops.py tests/cuda/test_cuda_prefill_attention.py --maxfail=30
log "engine tests"
pytest_phase "ENGINE TESTS" 30 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3"
bench_models_ready
log "bench_cuda.py (llama.cpp, issue 12: llama3-8b Q4_0 334/602/942 tok/s at 1/2/4 seqs, pp512 ~11000;" \
    "Q4_K 290/497/741; smollm2-135m Q4_0 873/1456/2471)"
timeout "$(cap 75)" python3 -u benchmarks/bench_cuda.py $bench_files 2>&1 | tee -a "$out/results.txt"
log "bench_cuda_gemm.py, Q4_0"
timeout "$(cap 12)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64 --types Q4_0 --no-groups 2>&1 |
  tee -a "$out/results.txt"
log "prefill attention alone"
timeout "$(cap 10)" python3 -u benchmarks/bench_cuda_attention.py --prefill-only --reps 5 2>&1 | tee -a "$out/results.txt"
log "step profile, llama3-8b Q4_0"
timeout "$(cap 30)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/llama3-8b-Q4_0.gguf" --top 10 \
  2>&1 | tee -a "$out/results.txt"
if [ -n "${EXTRA_PHASES:-}" ]; then
  log "extra: $EXTRA_PHASES"
  timeout "$(left)" bash -c "$EXTRA_PHASES" 2>&1 | tee -a "$out/results.txt"
fi
log "done, status $status"
exit $status
