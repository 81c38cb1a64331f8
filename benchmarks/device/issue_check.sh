#!/usr/bin/env bash
# Issues 11 and 12 in one device call of under 10 minutes: the CUDA check (build, op and engine tests, attention,
# decode and prefill speed, the step profile), the decode speed again with programmatic dependent launch off
# (MUSER_CUDA_PDL=0, to show what it buys), then the Xeon tables beside llama.cpp (small: six models at 4 and 16
# threads; big: llama3-8b at 16 threads, read bandwidth and thread scaling) while time is left.
#   bash benchmarks/device/issue_check.sh          (from the repository root, `.device` and $PYLIB carried)
# Output under $OUT: results.txt (CUDA), table-small.txt, table-big.txt and the build logs.
set -uo pipefail
here=$(dirname "$0")
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
out=${OUT:-/tmp/out}; mkdir -p "$out"

DEADLINE=${CUDA_DEADLINE:-200} bash "$here/cuda_decode_check.sh"
cuda_status=$?
echo "[$(el) s] bench_cuda.py with programmatic dependent launch off (MUSER_CUDA_PDL=0)" | tee -a "$out/results.txt"
MUSER_CUDA_PDL=0 PYTHONPATH="$(pwd)/src:$(pwd):${PYLIB:-$(pwd)/.cudawork/lead/pylib}" timeout 60 python3 -u \
  benchmarks/bench_cuda.py /tmp/muser-bench/llama3-8b-Q4_0.gguf /tmp/muser-bench/smollm2-135m-Q4_0.gguf 2>&1 |
  tee -a "$out/results.txt"
[ "$(el)" -lt 330 ] && bash "$here/cpu_full_table.sh" small
[ "$(el)" -lt 380 ] && bash "$here/cpu_full_table.sh" big
echo "[$(el) s] end, CUDA status $cuda_status"
exit $cuda_status
