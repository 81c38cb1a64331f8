#!/usr/bin/env bash
# Issue 12's table with llama.cpp measured in the same call (the issue's "same call" rule):
#
#   bash benchmarks/device/cuda_same_call.sh      (repository root; .device and $PYLIB carried)
#
# While llama.cpp's CUDA build (.device/cuda-peer.sh's build step, CPU only) runs in the background:
# muser's CUDA build (cuda_common.sh), the op tests, and the step profile (benchmarks/bench_cuda_step_profile.py)
# of llama3-8b Q4_0 and smollm2-135m Q4_0 with programmatic dependent launch off (MUSER_CUDA_PDL=0: each kernel's
# duration is its own, not its wait for the one before) and on. Then, with the CPU quiet, llama.cpp's anchors
# (.device/cuda-peer.sh, its binaries already built) and bench_cuda.py --peer on the same three models: the
# table with muser / llama.cpp per cell. PROFILE=0 skips the profile. DEADLINE (default 560 s) bounds it all.
# Results: $OUT/results.txt, $OUT/peer.txt, $OUT/ops.xml.
export BENCH_MODELS=${BENCH_MODELS:-smollm2-135m-Q4_0 llama3-8b-Q4_0 llama3-8b-Q4_K}
DEADLINE=${DEADLINE:-560}
peer_build=$(mktemp)
sed '/^for m in/,$d' .device/cuda-peer.sh > "$peer_build"   # the build step alone (it skips a built peer)
( bash "$peer_build" > /tmp/peer-build.log 2>&1; echo "peer build rc $?" >> /tmp/peer-build.log ) &
peer=$!
. "$(dirname "$0")/cuda_common.sh"
log "ops tests"
pytest_phase "OPS TESTS" 60 ops.xml tests/cuda/test_cuda_ops.py tests/cuda/test_cuda_prefill_attention.py --maxfail=30
bench_models_ready
if [ "${PROFILE:-1}" != 0 ]; then
  for pdl in 0 1; do
    for m in llama3-8b-Q4_0 smollm2-135m-Q4_0; do
      log "step profile $m, MUSER_CUDA_PDL=$pdl"
      MUSER_CUDA_PDL=$pdl timeout "$(cap 40)" python3 -u benchmarks/bench_cuda_step_profile.py \
        "$bench_dir/$m.gguf" --rows 1,4 --top 14 --prefill 0 2>&1 | tee -a "$out/results.txt"
    done
  done
fi
log "waiting for llama.cpp's build"
wait "$peer"; tail -3 /tmp/peer-build.log | tee -a "$out/results.txt"
log "llama.cpp anchors"
timeout "$(cap 150)" bash .device/cuda-peer.sh 2>&1 | tee "$out/peer.txt" | tee -a "$out/results.txt"
log "bench_cuda.py --peer"
timeout "$(cap 120)" python3 -u benchmarks/bench_cuda.py $bench_files --peer "$out/peer.txt" 2>&1 |
  tee -a "$out/results.txt"
log "done, status $status"
exit $status
