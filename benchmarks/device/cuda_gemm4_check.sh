#!/usr/bin/env bash
# The GPU check of branch cuda-gemm4 (issue 12, the prefill GEMM), one call of about 150 s on the H200:
#
#   DEADLINE=150 bash benchmarks/device/cuda_gemm4_check.sh   (from the repository root, $PYLIB carried)
#
# The versions it compares, both computing the same bits (since the run of 2026-12-02 08:50, in which every
# phase passed, packed is the default for Q4_0; the TMA kernel that run also timed was removed after it):
#   MUSER_CUDA_GEMM=packed  ops_gemm_mma_packed.cu (Q4_0; = the default): weights packed at upload and activations
#                           packed per call in the walk's order, so a stage is 8 contiguous 16-byte copies per
#                           thread, no decode pass
#   MUSER_CUDA_GEMM=v1      ops_gemm_mma_v1.cu, every type
# Phases (each only while the budget lasts; a failing test phase still prints its failures and the later phases
# still run; the new kernels' tests each in their own process, so a sticky error poisons nothing else):
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda, and benchmarks/device/mma_rate.cu; meanwhile the
#            random-weight models are written
#   packed   the GEMM and matvec tests of tests/cuda/test_cuda_ops.py under packed (bitwise the matvec)
#   gbench   benchmarks/bench_cuda_gemm.py at 512 and 64 rows (Q4_0): packed (if its tests passed), v1
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b cells under packed (prefill chunking invariance,
#            batch invariance, parity through the backend's packed weights)
#   pp512    benchmarks/bench_cuda.py --prefill-only, llama3-8b Q4_0, under packed
#   rate     mma_rate: the int8 mma.sync rate alone and with the GEMM's 16 float instructions per MMA
#   ncu      one q launch (512 x 4096 x 4096 Q4_0) with stall reasons and pipe utilizations: packed, then v1
# Results: $OUT/results.txt, build.log, packed.xml, engine.xml, ncu-packed.txt, ncu-v1.txt; non-zero
# exit on failure.
. "$(dirname "$0")/cuda_common.sh"

# gemm_tests VERSION: the GEMM/matvec tests under MUSER_CUDA_GEMM=VERSION in their own process; sets ok_VERSION.
gemm_tests() {
  log "gemm tests, MUSER_CUDA_GEMM=$1 (own process)"
  export MUSER_CUDA_GEMM=$1
  pytest_phase "GEMM TESTS ($1)" 30 "$1.xml" tests/cuda/test_cuda_ops.py --maxfail=3 -k "gemm or matvec"
  unset MUSER_CUDA_GEMM
  if grep -q 'failures="0"' "$out/$1.xml" 2>/dev/null && grep -q 'errors="0"' "$out/$1.xml"; then
    eval "ok_$1=1"
  else
    eval "ok_$1=0"
  fi
}
gemm_tests packed

for version in packed v1; do
  eval "ok=\${ok_$version:-1}"
  [ "$ok" = 1 ] || { log "bench $version skipped (its tests failed)"; continue; }
  log "bench_cuda_gemm.py, MUSER_CUDA_GEMM=$version (v1 at 06:04: Q4_0 512 rows q 195 us, gate 663, down 768)"
  MUSER_CUDA_GEMM=$version timeout "$(cap 10)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64 \
    --types Q4_0 --no-groups 2>&1 | tee -a "$out/results.txt"
done

if [ "$ok_packed" = 1 ]; then
  log "engine tests, MUSER_CUDA_GEMM=packed"
  export MUSER_CUDA_GEMM=packed
  pytest_phase "ENGINE TESTS (packed)" 20 engine.xml tests/cuda/test_cuda_engine.py --maxfail=10 -k "not llama3"
  unset MUSER_CUDA_GEMM
  bench_models_ready
  log "pp512, MUSER_CUDA_GEMM=packed (v1 at s6-4: llama3-8b Q4_0 5158; llama.cpp ~11000)"
  MUSER_CUDA_GEMM=packed timeout "$(cap 15)" python3 -u benchmarks/bench_cuda.py --prefill-only \
    "$bench_dir/llama3-8b-Q4_0.gguf" 2>&1 | tee -a "$out/results.txt"
fi

log "mma_rate"
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if "$nvcc_bin" -O3 -arch=sm_90 --fmad=false -o /tmp/mma_rate benchmarks/device/mma_rate.cu >>"$out/build.log" 2>&1; then
  timeout "$(cap 8)" /tmp/mma_rate 2>&1 | tee -a "$out/results.txt"
else
  log "mma_rate did not build"
fi

ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_versions=v1; [ "$ok_packed" = 1 ] && ncu_versions="packed v1"
for version in $ncu_versions; do
  [ -n "$ncu_bin" ] || { log "no ncu on this machine"; break; }
  log "ncu, MUSER_CUDA_GEMM=$version: $ncu_bin"
  MUSER_CUDA_GEMM=$version timeout "$(cap 15)" "$ncu_bin" --target-processes all -k regex:gemm_ --launch-skip 1 \
    --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section InstructionStats --print-details all \
    --metrics "regex:(smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__inst_executed_pipe_.*avg\.pct_of_peak_sustained_active|sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active)" \
    python3 benchmarks/bench_cuda_gemm.py --rows 512 --types Q4_0 --shapes q --reps 1 --no-groups \
    >"$out/ncu-$version.txt" 2>&1
  grep -E "Duration|Issued Warp|Executed Instructions  |stalled|pipe_" "$out/ncu-$version.txt" |
    grep -vE " 0(\.0+)?$| n/a$" | awk '{print $NF "\t" $1}' | sort -g -r | head -24 | tee -a "$out/results.txt"
done

log "done, status $status"
exit $status
