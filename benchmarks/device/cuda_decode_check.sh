#!/usr/bin/env bash
# The GPU check of the decode kernels (issue 12: split attention, rms_norm, rope, fused launches), in one call
# of about 5 minutes on the H200 host:
#
#   bash benchmarks/device/cuda_decode_check.sh        (from the repository root, $PYLIB carried)
#
# Carry the pure-Python packages the device image lacks (gguf, ...) in the folder $PYLIB names
# (default .cudawork/lead/pylib). Phases, each only while the budget (DEADLINE seconds, default 300)
# lasts; a failing test phase still prints its failures and the later phases still run:
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda; meanwhile the random-weight real-shape
#            models $BENCH_MODELS (default llama3-8b Q4_0 and smollm2-135m Q4_0; tests/cuda/random_real_shapes.py)
#            are written
#   ops      tests/cuda/test_cuda_ops.py (attention at 24 context lengths up to 4095, rings and
#            windows, rows bitwise across groups/orders/tiles; rms_norm, rope, matvec, quantize)
#   attn     benchmarks/bench_cuda_attention.py: the attention alone, us per layer at 140, 1024 and
#            4096 positions, llama3-8b and smollm2 head layouts, 1 and 4 rows
#   engine   tests/cuda/test_cuda_engine.py (CPU-vs-CUDA parity, batch and chunking invariance),
#            less its llama3-8b Q4_K real-shape cell
#   bench    benchmarks/bench_cuda.py on those models: decode tok/s at 1/2/4 rows, pp512, bandwidth
#   profile  benchmarks/bench_cuda_step_profile.py on llama3-8b Q4_0: GPU time per kernel per step
# Results: $OUT/results.txt (everything printed), build.log, ops.xml, engine.xml, report.jsonl;
# exit status non-zero if the build or a test failed.
. "$(dirname "$0")/cuda_common.sh"

log "ops tests"
pytest_phase "OPS TESTS" 75 ops.xml tests/cuda/test_cuda_ops.py --maxfail=30

log "attention alone (us per layer, KV evicted from L2 first)"
timeout "$(cap 40)" python3 -u benchmarks/bench_cuda_attention.py 2>&1 | tee -a "$out/results.txt"

bench_models_ready

# The engine suite without its llama3-8b Q4_K real-shape cell (writing and running that model on
# the CPU takes minutes; the smollm2 real shapes and the tiny models keep parity and invariance).
log "engine tests"
pytest_phase "ENGINE TESTS" 80 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3"

log "bench_cuda.py (llama.cpp, issue 12: llama3-8b Q4_0 334/602/942 tok/s at 1/2/4 seqs, pp512 ~11000;" \
    "smollm2-135m Q4_0 873/1456/2471)"
timeout "$(cap 80)" python3 -u benchmarks/bench_cuda.py $bench_files 2>&1 | tee -a "$out/results.txt"

log "step profile, llama3-8b Q4_0"
timeout "$(left)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/llama3-8b-Q4_0.gguf" --top 12 \
  2>&1 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
