#!/usr/bin/env bash
# One device call that checks the GPU and measures the CPU (fits in about 5 minutes of device time):
#  1. builds muser with CUDA (sm_90) and runs the new GPU tests (saved sessions, embeddings);
#  2. builds llama.cpp (CPU) alongside, writes random-weight GGUFs of real shapes;
#  3. prints muser (mb.py) beside llama-bench / llama-batched-bench at 4 and 16 threads,
#     then thread scaling (smollm2, llama-1b) with bandwidth, while time lasts.
#   bash benchmarks/device/cpu_vs_llamacpp_and_gpu_tests.sh   (from the repository root)
# Carry `.device` (../shared/tools/device/README.md says how to fill it) and a folder of the pure-Python
# packages the device image lacks (jinja2, markupsafe, platformdirs, tqdm, gguf), named by PYLIB
# (default .cudawork/lead/pylib). Results: $OUT/results.txt; ~190 s on the H200 host.
set -uo pipefail
. "$(dirname "$0")/common.sh" results.txt

build_llamacpp_cpu llama-bench llama-batched-bench &
peer=$!
gen_models smollm2-135m:Q4_0 llama-1b:Q4_0 llama-1b:Q4_K &
gen=$!
if ! { cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=ON -DMUSER_CUDA_ARCHITECTURES=90-real \
         -DPython_EXECUTABLE="$(command -v python3)" && cmake --build build/cuda -j 10; } >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"; log "MUSER BUILD FAILED"; exit 1
fi
cp build/cuda/_core*.so src/muser/
log "muser built"
export PYTHONPATH="$root/src:$root:$lib"
MUSER_CUDA_TESTS=1 timeout 100 python3 -m pytest tests/cuda/test_cuda_engine.py -q -p no:cacheprovider \
  -k "saved_session or embeddings" -rf 2>&1 | tail -8 | tee -a "$out/results.txt"
log "gpu tests done"
wait $gen; wait $peer; log "models and llama.cpp ready"
bench() {  # model threads
  local f="$w/$1.gguf" t=$2
  timeout 60 python3 -u "$d/mb.py" "$f" "$t" 2>&1 | tail -1 | tee -a "$out/results.txt"
  [ -x "$w/b/bin/llama-bench" ] || return
  timeout 60 "$w/b/bin/llama-bench" -m "$f" -t "$t" -p 512 -n 64 -r 2 -o csv 2>/dev/null |
    python3 -c "import csv,sys; r=list(csv.DictReader(sys.stdin)); print('llama   %-28s t=%-3s pp512 %8.1f  tg %7.1f' % (sys.argv[1], sys.argv[2], *[float(x['avg_ts']) for x in r]))" "$1" "$t" | tee -a "$out/results.txt"
  timeout 60 "$w/b/bin/llama-batched-bench" -m "$f" -t "$t" -c 2048 -b 512 -ub 512 -npp 64 -ntg 32 -npl 4 2>/dev/null |
    awk -F'|' -v f="$1" -v t="$t" '/^\|[ ]+[0-9]/{printf "llama   %-28s t=%-3s 4-seq decode %7.1f\n", f, t, $9}' | tee -a "$out/results.txt"
}
for m in smollm2-135m-Q4_0 llama-1b-Q4_0 llama-1b-Q4_K; do
  for t in 4 16; do [ "$(el)" -lt 200 ] && bench "$m" "$t"; done
done
log "thread scaling"
[ "$(el)" -lt 215 ] && timeout 45 python3 -u benchmarks/bench_thread_scaling.py "$w/smollm2-135m-Q4_0.gguf" --threads 1,2,4,8,16 2>&1 | tee -a "$out/results.txt"
[ "$(el)" -lt 235 ] && timeout $(( 285 - $(el) )) python3 -u benchmarks/bench_thread_scaling.py "$w/llama-1b-Q4_0.gguf" --threads 16,8,4,2,1 --prompt 128 --steps 32 --group-steps 16 2>&1 | tee -a "$out/results.txt"
log "end"
