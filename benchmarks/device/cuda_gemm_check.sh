#!/usr/bin/env bash
# The GPU check of the int8 tensor-core prefill GEMM (issue 12, ops_gemm_mma.cu), in one call of
# about 5 minutes on the H200 host:
#
#   DEADLINE=300 bash benchmarks/device/cuda_gemm_check.sh   (from the repository root, $PYLIB carried)
#
# Phases (each only while the budget lasts; a failing test phase still prints its failures and the
# later phases still run):
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda; meanwhile the random-weight llama3-8b and
#            smollm2-135m Q4_0 models are written
#   gemm     the GEMM and matvec tests of tests/cuda/test_cuda_ops.py (bitwise the matvec row by row,
#            float reference)
#   bench    benchmarks/bench_cuda.py on llama3-8b Q4_0 and smollm2 (pp512 beside decode)
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b Q4_K cell (parity, batch/chunk invariance)
#   gbench   benchmarks/bench_cuda_gemm.py: us per llama3-8b matrix at 512, 64, 16 and 8 rows (GEMM vs
#            decode groups of 4)
#   ops      the rest of tests/cuda/test_cuda_ops.py
#   profile  benchmarks/bench_cuda_step_profile.py, prefill 512 of llama3-8b Q4_0
# Results: $OUT/results.txt, build.log, gemm.xml, engine.xml, ops.xml; non-zero exit on failure.
. "$(dirname "$0")/cuda_common.sh"

log "gemm tests"
pytest_phase "GEMM TESTS" 90 gemm.xml tests/cuda/test_cuda_ops.py --maxfail=20 -k "gemm or matvec"

bench_models_ready

log "bench_cuda.py (llama.cpp: llama3-8b Q4_0 pp512 ~11000; before this GEMM 1540)"
timeout "$(cap 60)" python3 -u benchmarks/bench_cuda.py "$bench_dir/llama3-8b-Q4_0.gguf" \
  "$bench_dir/smollm2-135m-Q4_0.gguf" 2>&1 | tee -a "$out/results.txt"

log "engine tests"
pytest_phase "ENGINE TESTS" 80 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3"

log "bench_cuda_gemm.py (us per call; 301 ms of matvec tiles per pp512 before)"
timeout "$(cap 40)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64,16,8 --types Q4_0,Q4_K 2>&1 | \
  tee -a "$out/results.txt"

log "other ops tests"
pytest_phase "OPS TESTS" 75 ops.xml tests/cuda/test_cuda_ops.py --maxfail=30 -k "not gemm and not matvec"

log "prefill profile, llama3-8b Q4_0"
timeout "$(left)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/llama3-8b-Q4_0.gguf" --rows 1 \
  --steps 4 --prefill 512 --top 12 2>&1 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
