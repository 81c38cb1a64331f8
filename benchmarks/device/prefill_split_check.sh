#!/usr/bin/env bash
# One device call (CPU only, ~5 minutes) for the prefill GEMM work of issue 11 (branch cpu-gemm):
#  1. builds muser (CPU) and llama.cpp (CPU, GGML_NATIVE) side by side, writes random-weight GGUFs;
#  2. per-matmul time of prefill-sized calls (512 rows) at 1, 4 and 16 threads with the row-block
#     split (2d, what matmul does now) and without it (1d, every task over all rows): the split's
#     effect on a 16-core machine, which the 2-core development box cannot show;
#  3. prefill 512 tok/s, muser (bench_thread_scaling) beside llama-bench pp512 at 1, 4 and 16 threads
#     (llama.cpp's 1-thread figure says whether muser's per-core gap there is the machine or the scaling).
#   bash benchmarks/device/prefill_split_check.sh   (from the repository root)
# Carry `.device` and PYLIB as for cpu_vs_llamacpp_and_gpu_tests.sh. Results: $OUT/results.txt.
set -uo pipefail
. "$(dirname "$0")/common.sh" results.txt

build_llamacpp_cpu llama-bench &
peer=$!
gen_models smollm2-135m:Q4_0 llama-1b:Q4_0 llama-1b:Q4_K &
gen=$!
build_muser_cpu build.log || exit 1
log "muser built"
export PYTHONPATH="$root/src:$root:$lib"
( cd benchmarks &&
  timeout 100 python3 -u bench_kernels.py --types Q4_0 --shapes 576x576,576x1536,1536x576,2048x2048,2048x8192,8192x2048 \
    --rows 512 --threads 16,4,1 --splits 2d,1d --min-seconds 0.15 2>&1 | tee -a "$out/results.txt"
  timeout 40 python3 -u bench_kernels.py --types Q4_K --shapes 2048x2048,2048x8192,8192x2048 \
    --rows 512 --threads 16,4 --splits 2d,1d --min-seconds 0.15 2>&1 | tee -a "$out/results.txt" )
wait $gen; wait $peer; log "models and llama.cpp ready"
for m in smollm2-135m-Q4_0 llama-1b-Q4_0 llama-1b-Q4_K; do
  [ "$(el)" -lt 260 ] || break
  timeout 60 python3 -u benchmarks/bench_thread_scaling.py "$w/$m.gguf" --threads 16,4,1 --steps 4 --group-steps 2 2>&1 |
    tee -a "$out/results.txt"
  [ -x "$w/b/bin/llama-bench" ] || continue
  timeout 60 "$w/b/bin/llama-bench" -m "$w/$m.gguf" -t 16,4,1 -p 512 -n 0 -r 1 -o csv 2>/dev/null |
    python3 -c "import csv,sys; [print('llama   %-22s t=%-3s pp512 %8.1f' % (sys.argv[1], r['n_threads'], float(r['avg_ts']))) for r in csv.DictReader(sys.stdin)]" "$m" |
    tee -a "$out/results.txt"
done
log "end"
