#!/usr/bin/env bash
# Issue 11's whole target table on the device host's CPU (16-core Xeon), muser beside llama.cpp,
# random-weight real shapes, in two device calls of under 10 minutes each:
#   bash benchmarks/device/cpu_full_table.sh small   # smollm2 Q4_0/Q4_1/Q8_0, llama-1b Q4_0/Q4_K/Q6_K at 4 and 16 threads
#   bash benchmarks/device/cpu_full_table.sh big     # read bandwidth, llama3-8b Q4_0 and Q4_K at 16 threads, thread scaling
# Run from the repository root, carrying `.device` (../shared/tools/device/README.md says how to fill it) and
# the pure-Python packages the device image lacks (jinja2, markupsafe, platformdirs, tqdm, gguf) in $PYLIB
# (default .cudawork/lead/pylib). Each part skips what a warm machine already built (llama.cpp, muser, models).
# ROUNDS=N (default 1) measures every cell N times, muser and llama.cpp alternating (the host's load drifts).
# Both sides follow llama-bench's protocol (benchmarks/device/muser_cells.py says how): single-row decode is
# TG=N tokens (default 64, as the device tool ran llama-bench) from an empty context; DEPTH=D adds a single-row decode column after D prompt
# tokens (llama-bench -d D). SPECS="model:TYPE ..." and THREADS="4 16" narrow a part to some cells.
# Output: $OUT/table-<part>.txt; `python3 benchmarks/device/format_table.py` turns it into the markdown table
# (the best of the rounds per side).
set -uo pipefail
part=${1:?usage: cpu_full_table.sh small|big}
. "$(dirname "$0")/common.sh" "table-$part.txt"

build_llamacpp_cpu llama-bench llama-batched-bench &
case $part in
  small) specs="smollm2-135m:Q4_0 smollm2-135m:Q4_1 smollm2-135m:Q8_0 llama-1b:Q4_0 llama-1b:Q4_K llama-1b:Q6_K"; threads="4 16" ;;
  big) specs="llama3-8b:Q4_0 llama3-8b:Q4_K"; threads="16" ;;
  *) echo "unknown part $part (small|big)"; exit 2 ;;
esac
specs=${SPECS:-$specs}; threads=${THREADS:-$threads}; tg=${TG:-64}; depth=${DEPTH:-0}
gen_models $specs &
build_muser_cpu "build-$part.log" || exit 1
export PYTHONPATH="$root/src:$root:$lib"
wait; log "muser, llama.cpp and models ready"
if [ "$part" = big ]; then
  log "read bandwidth (benchmarks/device/read_bandwidth.c): the ceiling of a decode step's bytes per second"
  gcc -O2 -march=native -fopenmp benchmarks/device/read_bandwidth.c -o "$w/read_bandwidth" &&
    timeout 60 "$w/read_bandwidth" 4 1,2,4,8,16 2>&1 | tee -a "$res"
fi

for s in $specs; do
  f="$w/${s%%:*}-${s##*:}.gguf"; name=$(basename "$f" .gguf)
  for t in $threads; do for round in $(seq "${ROUNDS:-1}"); do
    timeout 150 python3 -u benchmarks/device/muser_cells.py "$f" "$t" --tg "$tg" --depth "$depth" 2>&1 | tail -1 | tee -a "$res"
    timeout 150 "$w/b/bin/llama-bench" -m "$f" -t "$t" -p 512 -n "$tg" -r 2 -o csv 2>/dev/null |
      python3 -c "import csv,sys; r=list(csv.DictReader(sys.stdin)); print('llama   %-28s t=%-3s pp512 %8.1f  tg %7.1f' % (sys.argv[1], sys.argv[2], *[float(x['avg_ts']) for x in r]))" "$name.gguf" "$t" | tee -a "$res"
    [ "$depth" -gt 0 ] && timeout 150 "$w/b/bin/llama-bench" -m "$f" -t "$t" -p 0 -n "$tg" -d "$depth" -r 2 -o csv 2>/dev/null |
      python3 -c "import csv,sys; r=list(csv.DictReader(sys.stdin)); print('llama   %-28s t=%-3s tg@%s %7.1f' % (sys.argv[1], sys.argv[2], sys.argv[3], float(r[0]['avg_ts'])))" "$name.gguf" "$t" "$depth" | tee -a "$res"
    timeout 150 "$w/b/bin/llama-batched-bench" -m "$f" -t "$t" -c 2048 -b 512 -ub 512 -npp 64 -ntg 32 -npl 4 2>/dev/null |
      awk -F'|' -v f="$name.gguf" -v t="$t" '/^\|[ ]+[0-9]/{printf "llama   %-28s t=%-3s 4-seq decode %7.1f\n", f, t, $9}' | tee -a "$res"
  done; done
done
if [ "$part" = big ]; then
  log "thread scaling"
  gen_models smollm2-135m:Q4_0 llama-1b:Q4_0
  f=$w/smollm2-135m-Q4_0.gguf
  [ "$(el)" -lt 420 ] && timeout 60 python3 -u benchmarks/bench_thread_scaling.py "$f" --threads 1,2,4,8,16 2>&1 | tee -a "$res"
  f=$w/llama-1b-Q4_0.gguf
  [ "$(el)" -lt 480 ] && timeout $(( 570 - $(el) )) python3 -u benchmarks/bench_thread_scaling.py "$f" --threads 16,8,4,2,1 \
    --prompt 128 --steps 32 --group-steps 16 2>&1 | tee -a "$res"
fi
log "end"
