#!/usr/bin/env bash
# A change to the CUDA backend against the behaviour an environment switch restores, in one call:
#
#   AB_ENV="MUSER_CUDA_FUSE=1" bash benchmarks/device/cuda_ab_check.sh   (repository root, $PYLIB carried)
# (session 8 measured its rms_norm change with a switch, MUSER_CUDA_NORM=strided, that only that build had)
#
# Phases (DEADLINE, default 420 s, for all): the CUDA build and models (cuda_common.sh; BENCH_MODELS), all op
# tests (OPS_CAP seconds, default 70), the engine tests less the llama3-8b cells (CPU parity, batch and chunking
# invariance), then the decode cells of bench_cuda.py (1/2/4 rows) with $AB_ENV ("A"), without it ("B", the
# change), and with it again, so drift during the call shows; then (FULL=1, the default) the full bench_cuda.py
# table without it. PEER (a file of .device/cuda-peer.sh's lines, optional) adds the llama.cpp column.
# Results: $OUT/results.txt, ops.xml, engine.xml.
DEADLINE=${DEADLINE:-420}
. "$(dirname "$0")/cuda_common.sh"
log "ops tests"
pytest_phase "OPS TESTS" "${OPS_CAP:-70}" ops.xml tests/cuda/test_cuda_ops.py tests/cuda/test_cuda_prefill_attention.py --maxfail=30
log "engine tests"
pytest_phase "ENGINE TESTS" 90 engine.xml tests/cuda/test_cuda_engine.py --maxfail=30 -k "not llama3"
bench_models_ready
peer_args=(); [ -n "${PEER:-}" ] && peer_args=(--peer "$PEER")
for round in A B A; do
  if [ "$round" = A ]; then log "decode, A: $AB_ENV"; ab=("${AB_ENV}"); else log "decode, B (the change)"; ab=(); fi
  env "${ab[@]}" timeout "$(cap 90)" python3 -u benchmarks/bench_cuda.py $bench_files --decode-only "${peer_args[@]}" \
    2>&1 | tee -a "$out/results.txt"
done
if [ "${FULL:-1}" = 1 ]; then
  log "full table, B"
  timeout "$(cap 120)" python3 -u benchmarks/bench_cuda.py $bench_files "${peer_args[@]}" 2>&1 | tee -a "$out/results.txt"
fi
log "done, status $status"
exit $status
