#!/usr/bin/env bash
# The GPU check of branch cuda-gemm4 (issue 12, the prefill GEMM), one call of about 150 s on the H200:
#
#   DEADLINE=150 bash benchmarks/device/cuda_gemm4_check.sh   (from the repository root, $PYLIB carried)
#
# gemm_mma runs the first version (ops_gemm_mma_v1.cu) by default; MUSER_CUDA_GEMM=tma picks the TMA kernel
# (ops_gemm_mma_tma.cu: its first run died of an illegal instruction, the fix since is unverified), =v3 the
# 16-warp cp.async kernel (device-verified, as fast as v1). Phases (each only while the budget lasts; a failing
# test phase still prints its failures and the later phases still run):
#   build    cmake + ninja (CUDA ON, sm_90) into build/cuda, and benchmarks/device/mma_rate.cu; meanwhile the
#            random-weight models are written
#   rate     mma_rate: the int8 mma.sync rate alone and with the GEMM's 16 float instructions per MMA (the
#            floor a GEMM under the exactness contract can reach)
#   tma      the GEMM and matvec tests of tests/cuda/test_cuda_ops.py under MUSER_CUDA_GEMM=tma, in their own
#            process (a sticky illegal-instruction error there poisons nothing else)
#   gbench   benchmarks/bench_cuda_gemm.py at 512 and 64 rows (Q4_0): v1, v3, and tma if its tests passed
#   ncu      one q launch (512 x 4096 x 4096 Q4_0) of v1 with the warp stall reasons and pipe utilizations
#            (ncu-v1.txt), then of tma if its tests passed (ncu-tma.txt)
#   pp512    benchmarks/bench_cuda.py --prefill-only on llama3-8b Q4_0 under tma (if its tests passed)
#   engine   tests/cuda/test_cuda_engine.py less its llama3-8b cells, under tma (if its tests passed)
# Results: $OUT/results.txt, build.log, tma.xml, engine.xml, ncu-v1.txt, ncu-tma.txt; non-zero exit on failure.
. "$(dirname "$0")/cuda_common.sh"

log "mma_rate"
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if "$nvcc_bin" -O3 -arch=sm_90 --fmad=false -o /tmp/mma_rate benchmarks/device/mma_rate.cu >>"$out/build.log" 2>&1; then
  timeout "$(cap 10)" /tmp/mma_rate 2>&1 | tee -a "$out/results.txt"
else
  log "mma_rate did not build"
fi

log "gemm tests, MUSER_CUDA_GEMM=tma (own process)"
tma_ok=1
export MUSER_CUDA_GEMM=tma
pytest_phase "GEMM TESTS (tma)" 30 tma.xml tests/cuda/test_cuda_ops.py --maxfail=3 -k "gemm or matvec"
unset MUSER_CUDA_GEMM
grep -q 'failures="0"' "$out/tma.xml" 2>/dev/null && grep -q 'errors="0"' "$out/tma.xml" || tma_ok=0
versions="v1 v3"; [ $tma_ok = 1 ] && versions="tma v1 v3"

for version in $versions; do
  log "bench_cuda_gemm.py, MUSER_CUDA_GEMM=$version (v1 at 06:04: Q4_0 512 rows q 195 us, gate 663, down 768)"
  MUSER_CUDA_GEMM=$version timeout "$(cap 10)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64 \
    --types Q4_0 --no-groups 2>&1 | tee -a "$out/results.txt"
done

ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_versions=v1; [ $tma_ok = 1 ] && ncu_versions="v1 tma"
for version in $ncu_versions; do
  [ -n "$ncu_bin" ] || { log "no ncu on this machine"; break; }
  log "ncu, MUSER_CUDA_GEMM=$version: $ncu_bin"
  MUSER_CUDA_GEMM=$version timeout "$(cap 20)" "$ncu_bin" --target-processes all -k regex:gemm_ --launch-skip 1 \
    --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --print-details all \
    --metrics "regex:(smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__inst_executed_pipe_.*avg\.pct_of_peak_sustained_active|sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active)" \
    python3 benchmarks/bench_cuda_gemm.py --rows 512 --types Q4_0 --shapes q --reps 1 --no-groups \
    >"$out/ncu-$version.txt" 2>&1
  grep -E "Duration|Issued Warp|stalled|pipe_" "$out/ncu-$version.txt" | grep -vE " 0(\.0+)?$| n/a$" |
    awk '{print $NF "\t" $1}' | sort -g -r | head -24 | tee -a "$out/results.txt"
done

if [ $tma_ok = 1 ]; then
  bench_models_ready
  log "pp512, MUSER_CUDA_GEMM=tma (v1 at s6-4: llama3-8b Q4_0 5158; llama.cpp ~11000)"
  MUSER_CUDA_GEMM=tma timeout "$(cap 15)" python3 -u benchmarks/bench_cuda.py --prefill-only \
    "$bench_dir/llama3-8b-Q4_0.gguf" 2>&1 | tee -a "$out/results.txt"
  log "engine tests, MUSER_CUDA_GEMM=tma"
  export MUSER_CUDA_GEMM=tma
  pytest_phase "ENGINE TESTS (tma)" 20 engine.xml tests/cuda/test_cuda_engine.py --maxfail=10 -k "not llama3"
  unset MUSER_CUDA_GEMM
fi

log "done, status $status"
exit $status
