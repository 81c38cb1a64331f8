#!/usr/bin/env bash
# The GPU check of the prefill attention kernel (issue 12, attention_shared_kernel in ops_attention.cu), in one
# call of about 150 s on the H200 host:
#
#   DEADLINE=150 bash benchmarks/device/cuda_pattn_check.sh   (from the repository root, $PYLIB carried)
#
# Phases (each only while the budget lasts; a failing test phase still prints its failures and the later phases
# still run):
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda; meanwhile the random-weight llama3-8b and
#            smollm2-135m Q4_0 models are written
#   attn     tests/cuda/test_cuda_prefill_attention.py (the prefill kernel bitwise the decode kernel, row by row)
#            and the attention tests of tests/cuda/test_cuda_ops.py
#   abench   benchmarks/bench_cuda_attention.py --prefill-only: us per layer for 512 rows, both kernels
#   bench    benchmarks/bench_cuda.py on llama3-8b Q4_0 (pp512 beside decode; before: pp512 ~4,230 tok/s)
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b cells (CPU parity, chunking invariance)
#   profile  benchmarks/bench_cuda_step_profile.py, prefill 512 of llama3-8b Q4_0 (attention ~38 ms before)
# Results: $OUT/results.txt, build.log, attn.xml, engine.xml; non-zero exit on failure.
. "$(dirname "$0")/cuda_common.sh"

log "prefill attention tests"
pytest_phase "ATTENTION TESTS" 35 attn.xml tests/cuda/test_cuda_prefill_attention.py tests/cuda/test_cuda_ops.py \
  --maxfail=20 -k "attention"

log "bench_cuda_attention.py --prefill-only (decode kernel vs prefill kernel, us per layer)"
timeout "$(cap 15)" python3 -u benchmarks/bench_cuda_attention.py --prefill-only --reps 5 2>&1 | \
  tee -a "$out/results.txt"

bench_models_ready

log "bench_cuda.py llama3-8b Q4_0 (pp512 before: ~4,230 tok/s; llama.cpp ~11,000)"
timeout "$(cap 25)" python3 -u benchmarks/bench_cuda.py "$bench_dir/llama3-8b-Q4_0.gguf" 2>&1 | \
  tee -a "$out/results.txt"

log "engine tests"
pytest_phase "ENGINE TESTS" 60 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3"

log "prefill profile, llama3-8b Q4_0"
timeout "$(left)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/llama3-8b-Q4_0.gguf" --rows 1 \
  --steps 4 --prefill 512 --top 8 2>&1 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
