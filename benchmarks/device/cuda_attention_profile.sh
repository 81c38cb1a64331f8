#!/usr/bin/env bash
# Where the prefill attention's time goes (issue 12: attention_shared_kernel, ~15% of llama3-8b's pp512), about
# 150 s after a build:
#
#   DEADLINE=200 bash benchmarks/device/cuda_attention_profile.sh   (from the repository root, $PYLIB carried)
#
# Phases: build (as cuda_common.sh) -> bench_cuda_attention.py --prefill-only (microseconds per layer of a
# 512-row segment at positions 0..511 and 1536..2047, each kernel and warp count; TILE_AB=1: also with
# MUSER_CUDA_PREFILL_TILE_ROWS=64, the launches of 64 rows) -> Nsight Compute on one prefill launch of 512 rows
# at positions 0..511, llama3-8b's layout: speed of light, occupancy, launch, scheduler and warp-state
# statistics, the memory tables, and the source counters (the SASS lines where warps stall; NCU_SOURCE=0 leaves
# them out). Results: $OUT/results.txt, ncu.txt.
BENCH_MODELS=${BENCH_MODELS:-smollm2-135m-Q4_0}
. "$(dirname "$0")/cuda_common.sh"

log "bench_cuda_attention.py --prefill-only"
timeout "$(cap 60)" python3 -u benchmarks/bench_cuda_attention.py --prefill-only --reps 10 2>&1 |
  tee -a "$out/results.txt"
if [ "${TILE_AB:-0}" = 1 ]; then
  log "bench_cuda_attention.py --prefill-only, MUSER_CUDA_PREFILL_TILE_ROWS=64"
  MUSER_CUDA_PREFILL_TILE_ROWS=64 timeout "$(cap 60)" python3 -u benchmarks/bench_cuda_attention.py \
    --prefill-only --reps 10 2>&1 | tee -a "$out/results.txt"
fi

log "ncu: the prefill kernel on 512 rows at positions 0..511 (llama3-8b layout)"
cat > /tmp/attention_ncu.py <<'PY'
import numpy as np
from muser._core import _testing as t
rng = np.random.default_rng(0)
n_head, n_head_kv, hd = 32, 8, 128
k = rng.standard_normal((512, n_head_kv * hd)).astype(np.float16).view(np.uint16)
v = rng.standard_normal((512, n_head_kv * hd)).astype(np.float16).view(np.uint16)
q = (rng.standard_normal((512, n_head * hd)) / np.sqrt(hd)).astype(np.float32)
t.cuda_time_attention(k, v, q, list(range(512)), n_head, n_head_kv, 1, "prefill", 0)
PY
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
  --section MemoryWorkloadAnalysis_Tables"
[ "${NCU_SOURCE:-1}" = 1 ] && sections="$sections --section SourceCounters"
ncu=${NCU:-/usr/local/cuda/bin/ncu}
# shellcheck disable=SC2086
timeout "$(left)" "$ncu" --kernel-name regex:'attention_shared_kernel' --launch-count 1 $sections \
  python3 /tmp/attention_ncu.py > "$out/ncu.txt" 2>&1
log "ncu status $? ($(wc -l < "$out/ncu.txt") lines in ncu.txt)"
grep -E "attention_shared_kernel|Duration|Issue Slots Busy|Issued Warp|No Eligible|Eligible Warps|\
Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Registers Per|Block Limit|Shared Memory|\
L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Stall|stall|Bank|Waves" \
  "$out/ncu.txt" | head -90 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
