#!/usr/bin/env bash
# One device call (under 10 minutes) that settles what issue 11's decode work left to measure on
# the device host's CPU (16-core Xeon):
#   1. gemv streams: packed decode kernels reading 1, 2 or 4 weight groups side by side
#      (kernel_set.h: the default is 1 everywhere; 4 is the candidate for Intel, unmeasured there);
#      kernels at 1 thread, then llama-1b Q4_0 / Q4_K and smollm2 Q4_0 decode at 1, 4, 16 threads;
#   2. which weight layout llama.cpp picked there (AMX or CPU_REPACK buffers: its one-row Q4_0
#      kernel differs) and its 1-thread decode, for the per-core ratio.
#   bash benchmarks/device/gemv_streams_check.sh
# Run from the repository root, carrying `.device` and $PYLIB as for cpu_full_table.sh (same
# directories, so a warm machine reuses that script's llama.cpp build and models).
# Output: $OUT/gemv-streams.txt.
set -uo pipefail
. "$(dirname "$0")/common.sh" gemv-streams.txt

build_llamacpp_cpu llama-bench &
gen_models llama-1b:Q4_0 llama-1b:Q4_K smollm2-135m:Q4_0 &
build_muser_cpu build-streams.log || exit 1
export PYTHONPATH="$root/src:$root/benchmarks:$root:$lib"
wait; log "ready; $(grep -m1 'model name' /proc/cpuinfo)"

timeout 150 python3 -u benchmarks/bench_gemv_streams.py --types Q4_0,Q4_K --shapes 2048x128256,2048x8192,8192x2048 \
  --rows 1,4 --rounds 2 --streams 1,2,4 2>&1 | tee -a "$res"
for m in llama-1b-Q4_0 llama-1b-Q4_K; do
  [ "$(el)" -lt 400 ] && timeout 150 python3 -u benchmarks/bench_gemv_streams.py --types "" --model "$w/$m.gguf" \
    --threads 1,4,16 --steps 16 --rounds 2 --streams 1,2,4 2>&1 | tee -a "$res"
done
[ "$(el)" -lt 450 ] && timeout 60 python3 -u benchmarks/bench_gemv_streams.py --types "" --model "$w/smollm2-135m-Q4_0.gguf" \
  --threads 4,16 --steps 48 --rounds 2 --streams 1,4 2>&1 | tee -a "$res"

log "llama.cpp: weight buffers and 1-thread decode"
for m in llama-1b-Q4_0 llama-1b-Q4_K; do
  [ "$(el)" -lt 540 ] || break
  timeout 40 "$w/b/bin/llama-bench" -m "$w/$m.gguf" -t 1 -p 0 -n 16 -r 1 -v >"$out/lb-$m.txt" 2>&1
  grep -i -E "AMX|REPACK|buffer size|tg16" "$out/lb-$m.txt" | head -8 | sed "s/^/$m: /" | tee -a "$res"
done
log "end"
