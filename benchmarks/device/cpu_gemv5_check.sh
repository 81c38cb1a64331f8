#!/usr/bin/env bash
# Issue 11, branch cpu-gemv5, on the device host's CPU (16-core Xeon), in under 4 minutes: how far a 4-row
# decode step now is from a 1-row one where decode should be bandwidth-bound (llama3-8b Q4_0, 16 threads:
# before the branch 54 ms per 1-row step and 70.5 ms per 4-row step, llama.cpp's 4-sequence decode 56.3 tok/s),
# beside the most the host's cores can read per second (the ceiling of any decode step).
#   bash benchmarks/device/cpu_gemv5_check.sh
# Run from the repository root with `.device` and $PYLIB carried, as for cpu_full_table.sh (same directories,
# so a warm machine reuses that script's models). Output: $OUT/gemv5.txt.
set -uo pipefail
. "$(dirname "$0")/common.sh" gemv5.txt

gen_models llama3-8b:Q4_0 llama-1b:Q4_0 &
build_muser_cpu build-gemv5.log || exit 1
export PYTHONPATH="$root/src:$root/benchmarks:$lib"
log "built; $(grep -m1 'model name' /proc/cpuinfo)"

log "read bandwidth (benchmarks/device/read_bandwidth.c), 2 GiB"
gcc -O2 -march=native -fopenmp benchmarks/device/read_bandwidth.c -o "$w/read_bandwidth" &&
  timeout 30 "$w/read_bandwidth" 2 1,4,16 2>&1 | tee -a "$res"

log "kernels, 1 thread, default streams: ms per call of 1, 2, 4 rows"
timeout 45 python3 -u benchmarks/bench_gemv_streams.py --types Q4_0,Q8_0 --shapes 4096x14336,14336x4096 \
  --rows 1,2,4 --streams 0 --rounds 1 --min-seconds 0.1 2>&1 | tee -a "$res"

wait; log "models ready"
[ "$(el)" -lt 170 ] && timeout $(( 225 - $(el) )) python3 -u benchmarks/bench_thread_scaling.py "$w/llama3-8b-Q4_0.gguf" \
  --threads 16 --prompt 16 --steps 32 --group-steps 16 --reps 2 2>&1 | tee -a "$res"
[ "$(el)" -lt 205 ] && timeout $(( 232 - $(el) )) python3 -u benchmarks/bench_thread_scaling.py "$w/llama-1b-Q4_0.gguf" \
  --threads 16,4 --prompt 64 --steps 32 --group-steps 16 2>&1 | tee -a "$res"
log "end"
