#!/usr/bin/env bash
# Where the prefill attention kernel's time goes (issue 12, attention_shared_kernel), about 100 s on the H200 host:
#
#   DEADLINE=100 bash benchmarks/device/cuda_pattn_profile.sh   (from the repository root, $PYLIB carried)
#
# Phases: build (as cuda_common.sh) -> the attention tests (bitwise, cap 25 s) -> bench_cuda_attention.py
# --prefill-only -> Nsight Compute on the last 64-row launch of a 512-row llama3-8b prefill (rows 448..511, the
# fullest): speed of light, occupancy, scheduler and warp-state statistics, and the source counters (the SASS
# lines where warps stall). Results: $OUT/results.txt, ncu.txt.
. "$(dirname "$0")/cuda_common.sh"

log "attention tests"
pytest_phase "ATTENTION TESTS" 25 attn.xml tests/cuda/test_cuda_prefill_attention.py tests/cuda/test_cuda_ops.py \
  --maxfail=20 -k "attention"

log "bench_cuda_attention.py --prefill-only"
timeout "$(cap 15)" python3 -u benchmarks/bench_cuda_attention.py --prefill-only --reps 5 2>&1 | \
  tee -a "$out/results.txt"

log "ncu, prefill kernel, rows 448..511 of a 512-row prefill"
cat > /tmp/pattn_ncu.py <<'PY'
import numpy as np
from muser._core import _testing as t
rng = np.random.default_rng(0)
k = rng.standard_normal((512, 8 * 128)).astype(np.float16).view(np.uint16)
v = rng.standard_normal((512, 8 * 128)).astype(np.float16).view(np.uint16)
q = (rng.standard_normal((512, 32 * 128)) / np.sqrt(128)).astype(np.float32)
t.cuda_attention(k, v, q, list(range(512)), 32, 8, 0, 0, 1.0, "prefill")
PY
ncu=${NCU:-/usr/local/cuda/bin/ncu}
timeout "$(left)" "$ncu" --kernel-name regex:attention_shared_kernel --launch-skip 7 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --section ComputeWorkloadAnalysis --section SourceCounters \
  python3 /tmp/pattn_ncu.py > "$out/ncu.txt" 2>&1
log "ncu status $? ($(wc -l < "$out/ncu.txt") lines in ncu.txt)"
grep -E "Duration|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Stall|stall" \
  "$out/ncu.txt" | head -40 | tee -a "$out/results.txt"

log "done, status $status"
exit $status
