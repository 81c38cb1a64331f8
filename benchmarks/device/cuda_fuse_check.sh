#!/usr/bin/env bash
# The GPU check of the fused decode launches (issue 12; MUSER_CUDA_FUSE levels: 1 = ops_matvec_fused.cu, the
# q/k/v matvec runs the RoPE and the KV store, the gate/up matvec the GLU and its quantization; 2 = also, on
# rows of at most 1024, each norm in the next matvec's prologue and the residual add in the previous one's
# epilogue, ops_matvec_fused_norm.cu), in one call of about 150 s:
#
#   DEADLINE=150 bash benchmarks/device/cuda_fuse_check.sh   (from the repository root, $PYLIB carried)
#
# Phases, each capped (DEADLINE, default 150 s, for the whole check; a failing test phase still prints its
# failures and the later phases still run):
#   build    cuda_common.sh: CUDA build (sm_90); meanwhile the random-weight smollm2-135m and llama3-8b
#            Q4_0 models are written
#   fused    tests/cuda/test_cuda_engine.py -k fused, in its own process first (a new kernel's sticky
#            error must not take the rest down): levels 1 and 2 give bitwise level 0's logits at 1, 4 and
#            2 rows, tiny models, then the smollm2 and llama3-8b layer shapes
#   ops      the rope and glu tests of tests/cuda/test_cuda_ops.py (glu's formula moved into glu_value.cuh;
#            the plain decode matvec kernels, moved into a header, compile to the same SASS as main's)
#   bench    benchmarks/bench_cuda.py on smollm2-135m and llama3-8b Q4_0, twice per level, alternating
#            MUSER_CUDA_FUSE=0 (separate launches, as main), 1 and 2 (the default)
#   engine   the rest of tests/cuda/test_cuda_engine.py less its llama3-8b Q4_K cell
#   profile  benchmarks/bench_cuda_step_profile.py on smollm2-135m Q4_0 at 1 and 4 rows (level 2), if time is left
# Results: $OUT/results.txt, fused.xml, fused-real.xml, ops.xml, engine.xml; non-zero exit if the build or a test failed.
DEADLINE=${DEADLINE:-150}
. "$(dirname "$0")/cuda_common.sh"

log "fused epilogue tests, tiny models"
pytest_phase "FUSED TESTS (tiny)" 25 fused.xml tests/cuda/test_cuda_engine.py -k "fused and not real"

bench_models_ready

log "fused epilogue tests, real layer shapes"
pytest_phase "FUSED TESTS (real)" 30 fused-real.xml tests/cuda/test_cuda_engine.py -k "fused and real"

log "ops tests (rope, glu; the plain matvec kernels compile to the same SASS as main's)"
pytest_phase "OPS TESTS" 15 ops.xml tests/cuda/test_cuda_ops.py --maxfail=20 -k "rope or glu"

log "bench_cuda.py, FUSE=0 (separate launches), 1, 2, two rounds (llama.cpp, issue 12: llama3-8b Q4_0" \
    "334/602/942 tok/s at 1/2/4 seqs; smollm2-135m Q4_0 873/1456/2471)"
for round in 1 2; do
  for fuse in 0 1 2; do
    echo "round $round MUSER_CUDA_FUSE=$fuse" | tee -a "$out/results.txt"
    MUSER_CUDA_FUSE=$fuse timeout "$(cap 12)" python3 -u benchmarks/bench_cuda.py $bench_files 2>&1 |
      grep -v "GPU memory" | tee -a "$out/results.txt"
  done
done

log "engine tests"
pytest_phase "ENGINE TESTS" 25 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3 and not fused"

log "step profile, smollm2-135m Q4_0 (level 2)"
timeout "$(cap 15)" python3 -u benchmarks/bench_cuda_step_profile.py "$bench_dir/smollm2-135m-Q4_0.gguf" \
  --rows 1,4 --steps 8 --prefill 0 --top 10 2>&1 | grep -v "Warning\|_warn_once" | tee -a "$out/results.txt"

log "done, status $status"
exit $status
