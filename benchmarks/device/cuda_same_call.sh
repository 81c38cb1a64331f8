#!/usr/bin/env bash
# Issue 12 in one call: every GPU test, and the target table with llama.cpp measured in the same call (the
# issue's "same call" rule):
#
#   bash benchmarks/device/cuda_same_call.sh      (repository root; .device and $PYLIB carried)
#
# While llama.cpp's CUDA build (.device/cuda-peer.sh's build step, CPU only) runs in the background: muser's
# CUDA build and the random-weight models (cuda_common.sh), then tests/cuda/run_on_gpu.sh (tests/cuda and the
# exactness suites on CUDA, its table), then GPU_EXTRA (a command string, optional: more tests). Then, with the
# CPU quiet: llama.cpp's anchors (.device/cuda-peer.sh, its binaries already built), bench_cuda.py --peer on
# BENCH_MODELS (the table: muser / llama.cpp per cell), EXTRA_PHASES (optional: A/B runs), and with PROFILE=1 the
# step profile (bench_cuda_step_profile.py, dependent launch off so each kernel's time is its own) of llama3-8b
# Q4_0 and smollm2-135m Q4_0 with what time is left. DEADLINE (default 570 s) bounds it all.
# Results: $OUT/results.txt, $OUT/peer.txt, $OUT/gpu/ (run_on_gpu.sh's XML and report.jsonl).
export BENCH_MODELS=${BENCH_MODELS:-smollm2-135m-Q4_0 llama3-8b-Q4_0 llama3-8b-Q4_K}
DEADLINE=${DEADLINE:-570}
peer_build=$(mktemp)
sed '/^for m in/,$d' .device/cuda-peer.sh > "$peer_build"   # the build step alone (it skips a built peer)
( bash "$peer_build" > /tmp/peer-build.log 2>&1; echo "peer build rc $?" >> /tmp/peer-build.log ) &
peer=$!
. "$(dirname "$0")/cuda_common.sh"
bench_models_ready
log "tests/cuda/run_on_gpu.sh"
OUT="$out/gpu" timeout "$(cap 240)" bash tests/cuda/run_on_gpu.sh 2>&1 | grep -v '^\.*\s*\[' | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "GPU TESTS FAILED (or timed out)"; }
rm -f "$out/gpu/build.log"
if [ -n "${GPU_EXTRA:-}" ]; then
  log "GPU_EXTRA: $GPU_EXTRA"
  timeout "$(cap 60)" bash -c "$GPU_EXTRA" 2>&1 | grep -v '^\.*\s*\[' | tee -a "$out/results.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "GPU_EXTRA FAILED (or timed out)"; }
fi
log "waiting for llama.cpp's build"
wait "$peer"; tail -2 /tmp/peer-build.log | tee -a "$out/results.txt"
log "llama.cpp anchors"
timeout "$(cap 120)" bash .device/cuda-peer.sh 2>&1 | tee "$out/peer.txt" | tee -a "$out/results.txt"
log "bench_cuda.py --peer"
timeout "$(cap 120)" python3 -u benchmarks/bench_cuda.py $bench_files --peer "$out/peer.txt" 2>&1 |
  tee -a "$out/results.txt"
if [ -n "${EXTRA_PHASES:-}" ]; then
  log "extra: $EXTRA_PHASES"
  PEER="$out/peer.txt" timeout "$(left)" bash -c "$EXTRA_PHASES" 2>&1 | tee -a "$out/results.txt"
fi
if [ "${PROFILE:-0}" = 1 ]; then
  for m in llama3-8b-Q4_0 smollm2-135m-Q4_0; do
    log "step profile $m, MUSER_CUDA_PDL=0"
    MUSER_CUDA_PDL=0 timeout "$(cap 30)" python3 -u benchmarks/bench_cuda_step_profile.py \
      "$bench_dir/$m.gguf" --rows 1,4 --top 12 --prefill 0 2>&1 | grep -v -i warn | tee -a "$out/results.txt"
  done
fi
log "done, status $status"
exit $status
