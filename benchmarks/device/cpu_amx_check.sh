#!/usr/bin/env bash
# The AMX tile kernels on the device host's Xeon, in one call of about 4 minutes: builds muser (CPU),
# says which table it chose, runs the kernel tests (AMX tables against the scalar reference, bitwise),
# times prefill-sized matmuls on the VNNI and AMX tables, and prefill end to end with AMX on and off
# (MUSER_CPU_AMX=0) beside llama.cpp's pp512 (which uses AMX there).
#   bash benchmarks/device/cpu_amx_check.sh
# Run from the repository root with `.device` and $PYLIB carried, as for cpu_full_table.sh.
# Output: $OUT/amx.txt (and amx-tests.xml).
set -uo pipefail
. "$(dirname "$0")/common.sh" amx.txt

build_llamacpp_cpu llama-bench &
gen_models smollm2-135m:Q4_0 smollm2-135m:Q8_0 &
build_muser_cpu build-amx.log || exit 1
export PYTHONPATH="$root/src:$root:$lib"
python3 -c "from muser._core import _testing as t; print('tables:', t.cpu_isas(), 'best:', t.best_isa())" 2>&1 | tee -a "$res"
timeout 150 python3 -m pytest tests/backend/test_amx_tiles.py tests/backend/test_matmul.py -q -p no:cacheprovider \
  --maxfail=20 --junitxml="$out/amx-tests.xml" 2>&1 | tail -25 | tee -a "$res"
( cd benchmarks && timeout 90 python3 -u bench_kernels.py --types Q4_0,Q8_0 --isas avx512vnni,avx512amx \
    --shapes 576x1536,2048x8192,8192x2048 --rows 512 --threads 1 --min-seconds 0.1 2>&1 | tee -a "$res" )
wait; log "models and llama.cpp ready"
for m in smollm2-135m-Q4_0 smollm2-135m-Q8_0; do
  [ "$(el)" -lt 420 ] || break
  for amx in 1 0; do
    echo "== MUSER_CPU_AMX=$amx $m" | tee -a "$res"
    MUSER_CPU_AMX=$amx timeout 60 python3 -u benchmarks/bench_thread_scaling.py "$w/$m.gguf" --threads 4,16 --steps 4 \
      --group-steps 2 2>&1 | grep -E '^ +[0-9]+ \|' | tee -a "$res"
  done
  timeout 60 "$w/b/bin/llama-bench" -m "$w/$m.gguf" -t 4,16 -p 512 -n 0 -r 1 -o csv 2>/dev/null |
    python3 -c "import csv,sys; [print('llama   %-22s t=%-3s pp512 %8.1f' % (sys.argv[1], r['n_threads'], float(r['avg_ts']))) for r in csv.DictReader(sys.stdin)]" "$m" |
    tee -a "$res"
done
log "end"
