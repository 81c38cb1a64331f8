#!/usr/bin/env bash
# Where the prefill GEMM's time goes (issue 12: gemm_packed_kernel, ~80% of llama3-8b's pp512), about 150 s:
#
#   DEADLINE=200 bash benchmarks/device/cuda_gemm_profile.sh   (from the repository root, $PYLIB carried)
#
# Phases: build (as cuda_common.sh) -> bench_cuda_gemm.py at 512 rows (Q4_0 and Q4_K, llama3-8b's seven
# matrices) -> Nsight Compute on three 512-row launches: Q4_0 q (4096 x 4096, the 4-step walk), Q4_0 down
# (4096 x 14336, the 8-step walk), and Q4_K gate (14336 x 4096, which has no GEMM: the 8-row matvec tiles):
# speed of light, occupancy, scheduler and warp-state statistics, the memory tables (shared memory, L1, L2),
# and the source counters (the SASS lines where warps stall). Results: $OUT/results.txt, ncu.txt.
BENCH_MODELS=${BENCH_MODELS:-smollm2-135m-Q4_0}
. "$(dirname "$0")/cuda_common.sh"

[ "${SKIP_BENCH:-0}" = 1 ] || {
log "bench_cuda_gemm.py --rows 512"
timeout "$(cap 60)" python3 -u benchmarks/bench_cuda_gemm.py --rows 512 --reps 10 --no-groups 2>&1 |
  tee -a "$out/results.txt"
}

log "ncu: Q4_0 q and down, Q4_K gate, 512 rows"
cat > /tmp/gemm_ncu.py <<'PY'
import numpy as np
from gguf import GGMLQuantizationType as GT
from muser._core import _testing as t
from tests.backend.kernel_cases import random_row
rng = np.random.default_rng(0)
# cuda_matvec_time_us makes the packed copy as the backend does (cuda_matvec does not: it runs v1).
for qtype, n_out, k in ((GT.Q4_0, 4096, 4096), (GT.Q4_0, 4096, 14336), (GT.Q4_K, 14336, 4096)):
    raw = random_row(qtype, n_out * k, rng)
    x = rng.standard_normal((512, k)).astype(np.float32)
    t.cuda_matvec_time_us(int(qtype), raw, n_out, x, reps=1)
PY
ncu=${NCU:-/usr/local/cuda/bin/ncu}
timeout "$(left)" "$ncu" --kernel-name regex:'gemm_packed_kernel' --launch-skip ${NCU_SKIP:-0} --launch-count ${NCU_COUNT:-1} \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section SourceCounters python3 /tmp/gemm_ncu.py > "$out/ncu.txt" 2>&1
log "ncu status $? ($(wc -l < "$out/ncu.txt") lines in ncu.txt)"
grep -E "gemm_packed_kernel|matvec_kernel|Duration|Issue Slots Busy|Issued Warp|No Eligible|Eligible Warps|\
Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Shared Memory|L2 Cache Throughput|L1/TEX Cache Throughput|\
Compute \(SM\) Throughput|Memory Throughput|Stall|stall|Bank" "$out/ncu.txt" | head -80 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
