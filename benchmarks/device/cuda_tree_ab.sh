#!/usr/bin/env bash
# This tree ("A") against another source tree ("B", say a branch) in one call, each with its own build, so
# that neither an environment switch nor a second call (another host, other clocks) stands between them:
#
#   rm -rf .cudawork/b && mkdir -p .cudawork/b && git archive BRANCH CMakeLists.txt csrc src | tar -x -C .cudawork/b
#   TREE_B=.cudawork/b bash benchmarks/device/cuda_tree_ab.sh     (repository root; carry $PYLIB and .cudawork/b)
#
# Phases (DEADLINE, default 420 s, for all): both CUDA builds at once (A's through cuda_common.sh with the
# BENCH_MODELS models, B's into $TREE_B/build/cuda), this tree's GPU tests against B's build (TESTS, default
# tests/cuda less the llama3-8b cells; B's own tests are not copied: a branch that changes tests runs them on
# main after merging, or is checked out as A with B the baseline and TEST_SIDE=A), then EXTRA_TESTS on the
# same side (optional: a pytest command, say under an environment switch), then the decode cells of
# bench_cuda.py (PREFILL=1: the pp512 cells instead; PREFILL=both: both, one after the other) for each of
# SIDES in turn (default "A B"; a side may carry environment settings,
# "B:MUSER_CUDA_ATTENTION_PREFETCH=0,MUSER_CUDA_PDL=0"), ROUNDS times (default 2), so drift during the call
# shows. Results: $OUT/results.txt, b-build.log.
DEADLINE=${DEADLINE:-420}
tree_b=$(cd "${TREE_B:?TREE_B names the other source tree}" && pwd)
out_early=${OUT:-/tmp/out}; mkdir -p "$out_early"
( cmake -S "$tree_b" -B "$tree_b/build/cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=ON \
    -DMUSER_CUDA_ARCHITECTURES=90-real -DPython_EXECUTABLE="$(command -v python3)" &&
  cmake --build "$tree_b/build/cuda" -j "$(( $(nproc) / 2 ))" &&
  cp "$tree_b"/build/cuda/_core*.so "$tree_b/src/muser/" ) > "$out_early/b-build.log" 2>&1 &
b_build=$!
. "$(dirname "$0")/cuda_common.sh"
log "waiting for B's build"
if ! wait "$b_build"; then
  tail -30 "$out/b-build.log" | tee -a "$out/results.txt"; log "B's BUILD FAILED"; exit 1
fi
tested=${TEST_SIDE:-B}; tested_src="$tree_b/src"; [ "$tested" = A ] && tested_src="$root/src"
log "tests on $tested: ${TESTS:-tests/cuda -k 'not llama3'}"
PYTHONPATH="$tested_src:$root:$lib" timeout "$(cap 240)" bash -c \
  "python3 -m pytest ${TESTS:-tests/cuda -k 'not llama3'} -q -p no:cacheprovider -rf --maxfail=20" 2>&1 |
  grep -v '^\.*\s*\[' | tail -20 | tee -a "$out/results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "TESTS ON $tested FAILED (or timed out)"; }
if [ -n "${EXTRA_TESTS:-}" ]; then  # say "MUSER_CUDA_GEMM_WIDE=1 python3 -m pytest tests/cuda/test_cuda_ops.py -k gemm"
  log "extra tests on $tested: $EXTRA_TESTS"
  PYTHONPATH="$tested_src:$root:$lib" timeout "$(cap 90)" bash -c "$EXTRA_TESTS -q -p no:cacheprovider -rf" 2>&1 |
    grep -v '^\.*\s*\[' | tail -10 | tee -a "$out/results.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "EXTRA TESTS ON $tested FAILED (or timed out)"; }
fi
bench_models_ready
case "${PREFILL:-0}" in
  1) cell_sets="--prefill-only" ;;
  both) cell_sets="--decode-only --prefill-only" ;;
  *) cell_sets="--decode-only" ;;
esac
for cells in $cell_sets; do
  for round in $(seq "${ROUNDS:-2}"); do
    for side in ${SIDES:-A B}; do
      tree=${side%%:*}; settings=""; [ "$side" != "$tree" ] && settings=${side#*:}
      src="$root/src"; [ "$tree" = B ] && src="$tree_b/src"
      log "round $round, $side $cells"
      env ${settings//,/ } PYTHONPATH="$src:$root:$lib" timeout "$(cap 90)" \
        python3 -u benchmarks/bench_cuda.py $bench_files $cells 2>&1 |
        grep -E "seq|pp512" | sed "s/^/$side /" | tee -a "$out/results.txt"
    done
  done
done
log "done, status $status"
exit $status
