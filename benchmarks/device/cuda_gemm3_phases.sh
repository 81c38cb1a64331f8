#!/usr/bin/env bash
# The tensor-core GEMM's phases (branch cuda-gemm3, issue 12) for a combined device call whose tree is already
# built (build/cuda's extension in src/muser) — about 60 s:
#
#   OUT=... DEADLINE=70 bash benchmarks/device/cuda_gemm3_phases.sh     (from the repository root, $PYLIB carried)
#
# Everything runs under MUSER_CUDA_GEMM=tma (the TMA kernel, ops_gemm_mma_tma.cu, opt-in and not yet run
# successfully on a GPU) unless said otherwise:
#   gemm     the GEMM and matvec tests of tests/cuda/test_cuda_ops.py (bitwise the matvec row by row; the TMA
#            kernel takes most shapes, the cp.async kernel those TMA cannot: k = 576 rows)
#   gbench   benchmarks/bench_cuda_gemm.py, 512 and 64 rows (Q4_0, Q8_0), then the default (v1, Q4_0, 512 rows)
#   pp512    benchmarks/bench_cuda.py --prefill-only on llama3-8b Q4_0 (the model of $MUSER_CUDA_MODELS if the
#            call wrote it, else written here)
#   ncu      if Nsight Compute is there: one q launch (512 x 4096 x 4096 Q4_0), with the warp stall reasons,
#            into ncu-gemm.txt
# Results: $OUT/gemm3-results.txt, gemm3.xml, ncu-gemm.txt; non-zero exit on a failed test phase.
set -uo pipefail
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}
out=${OUT:-/tmp/out}; mkdir -p "$out"
deadline=${DEADLINE:-70}
models=${MUSER_CUDA_MODELS:-/tmp/muser-cuda-models}; mkdir -p "$models"
export PYTHONPATH="$root/src:$root:$lib" MUSER_CUDA_TESTS=1 MUSER_CUDA_GEMM=tma
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
left() { local l=$(( deadline - $(el) )); echo $(( l > 1 ? l : 1 )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
res="$out/gemm3-results.txt"
log() { echo "[gemm3 $(el) s] $*" | tee -a "$res"; }
status=0

model="$models/spread-llama3-8b-Q4_0.gguf"
gen=""
if [ ! -f "$model" ]; then
  python3 -c "import sys; from tests.cuda.random_real_shapes import write_real_shape as w; \
w(sys.argv[1], 'llama3-8b', 'Q4_0')" "$model" > "$out/gemm3-gen.log" 2>&1 &
  gen=$!
fi

log "gemm tests"
timeout "$(cap 30)" python3 -m pytest tests/cuda/test_cuda_ops.py -q -p no:cacheprovider -rf -k "gemm or matvec" \
  --maxfail=20 --junitxml="$out/gemm3.xml" 2>&1 | tail -15 | tee -a "$res"
[ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; log "GEMM TESTS FAILED (or timed out)"; }

log "bench_cuda_gemm.py (v1 at 06:04: Q4_0 512 rows q 195 us, gate 663, down 768; 64 rows q 49)"
timeout "$(cap 12)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512,64 --types Q4_0,Q8_0 --no-groups 2>&1 |
  tee -a "$res"
MUSER_CUDA_GEMM=v1 timeout "$(cap 8)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512 --types Q4_0 \
  --no-groups 2>&1 | tee -a "$res"

[ -z "$gen" ] || wait "$gen"
log "pp512 llama3-8b Q4_0 (v1 GEMM with main's attention at 06:04: 4,900; llama.cpp ~11,000)"
timeout "$(cap 20)" python3 -u benchmarks/bench_cuda.py --prefill-only "$model" 2>&1 | tee -a "$res"

ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$ncu_bin" ] && [ "$(left)" -gt 8 ]; then
  log "ncu: $ncu_bin"
  timeout "$(cap 15)" "$ncu_bin" --target-processes all -k regex:gemm_ --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 benchmarks/bench_cuda_gemm.py --rows 512 --types Q4_0 --shapes q --reps 1 --no-groups \
    >"$out/ncu-gemm.txt" 2>&1
  grep -E "Duration|Issued Warp|L1/TEX Cache|stalled" "$out/ncu-gemm.txt" |
    awk '{print $NF "\t" $1 " " $2 " " $3}' | sort -g -r | head -14 | tee -a "$res"
fi
log "done, status $status"
exit $status
