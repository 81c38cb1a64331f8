#!/usr/bin/env bash
# The GPU check of the fused decode epilogues (issue 12, ops_matvec_fused.cu: the q/k/v matvec runs the RoPE and
# the KV store, the gate/up matvec the GLU and its quantization; the default for decode groups of 2..4 rows,
# every decode step with MUSER_CUDA_FUSE=1), in one call of about 3.5 minutes:
#
#   DEADLINE=230 bash benchmarks/device/cuda_fuse_check.sh   (from the repository root, $PYLIB carried)
#
# Phases, each capped (DEADLINE, default 230 s, for the whole check; a failing test phase still prints its
# failures and the later phases still run):
#   build    cuda_common.sh: CUDA build (sm_90); meanwhile the random-weight smollm2-135m and llama3-8b
#            Q4_0 models are written
#   fused    tests/cuda/test_cuda_engine.py -k fused, in its own process first (a new kernel's sticky
#            error must not take the rest down): MUSER_CUDA_FUSE=1 and 0 give bitwise the same logits at 1,
#            4 and 2 rows, tiny models, then the smollm2 and llama3-8b layer shapes
#   ops      the rope and glu tests of tests/cuda/test_cuda_ops.py (glu's formula moved into glu_value.cuh;
#            the plain decode matvec kernels, moved into a header, compile to the same SASS as main's)
#   engine   the rest of tests/cuda/test_cuda_engine.py less its llama3-8b Q4_K cell, with MUSER_CUDA_FUSE=1
#            (CPU parity, batch and chunking invariance, snapshots on the fused path; default-path engine
#            tests are the other checks' business)
#   bench    benchmarks/bench_cuda.py on smollm2-135m and llama3-8b Q4_0, MUSER_CUDA_FUSE=0 then 1, twice
#            (the llama3-8b load takes ~10 s of each run)
#   profile  benchmarks/bench_cuda_step_profile.py on smollm2-135m Q4_0 at 1 and 4 rows, fused, if time is left
# Results: $OUT/results.txt, fused.xml, fused-real.xml, ops.xml, engine.xml; non-zero exit if the build or a
# test failed.
DEADLINE=${DEADLINE:-230}
. "$(dirname "$0")/cuda_common.sh"

log "fused epilogue tests, tiny models"
pytest_phase "FUSED TESTS (tiny)" 25 fused.xml tests/cuda/test_cuda_engine.py -k "fused and not real"

bench_models_ready

log "fused epilogue tests, real layer shapes"
pytest_phase "FUSED TESTS (real)" 30 fused-real.xml tests/cuda/test_cuda_engine.py -k "fused and real"

log "ops tests (rope, glu)"
pytest_phase "OPS TESTS" 15 ops.xml tests/cuda/test_cuda_ops.py --maxfail=20 -k "rope or glu"

log "engine tests, MUSER_CUDA_FUSE=1"
MUSER_CUDA_FUSE=1 pytest_phase "ENGINE TESTS (fused)" 30 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 \
  -k "not llama3 and not fused"

log "bench_cuda.py, MUSER_CUDA_FUSE=0 (main's launches) then 1, two rounds (llama.cpp, issue 12: llama3-8b" \
    "Q4_0 334/602/942 tok/s at 1/2/4 seqs; smollm2-135m Q4_0 873/1456/2471)"
for round in 1 2; do
  for fuse in 0 1; do
    echo "round $round MUSER_CUDA_FUSE=$fuse" | tee -a "$out/results.txt"
    MUSER_CUDA_FUSE=$fuse timeout "$(cap 30)" python3 -u benchmarks/bench_cuda.py $bench_files 2>&1 |
      grep -v "GPU memory" | tee -a "$out/results.txt"
  done
done

log "step profile, smollm2-135m Q4_0, MUSER_CUDA_FUSE=1"
MUSER_CUDA_FUSE=1 timeout "$(cap 15)" python3 -u benchmarks/bench_cuda_step_profile.py \
  "$bench_dir/smollm2-135m-Q4_0.gguf" --rows 1,4 --steps 8 --prefill 0 --top 10 2>&1 |
  grep -v "Warning\|_warn_once" | tee -a "$out/results.txt"

log "done, status $status"
exit $status
