#!/usr/bin/env bash
# Issue 11, branch cpu-decode6, on the device host: this checkout ("old") beside a copy with PATCH applied
# ("new": the branch's csrc diff against main), decode only, alternating old/new per round and swapping the
# order every other round (the host's speed drifts in phases of tens of seconds).
#   git diff main cpu-decode6 -- csrc > .ab.patch      (untracked, so it travels with the tree)
#   bash benchmarks/device/cpu_decode6_check.sh .ab.patch
# Cells: smollm2-135m Q8_0 and llama-1b Q4_0, 4 and 16 threads, single-row decode and the 4-row aggregate
# (bench_thread_scaling.py; the prefill column is a 16-token prompt, not a cell of the issue's table).
# NEW_ENVS="VAR=value ..." adds a run of the new tree per setting. ROUNDS (default 3) rounds, each in the
# opposite order of the one before; no run starts past 230 s.
# Run from the repository root with `.device` and $PYLIB carried. Output: $OUT/decode6.txt. ~150 s.
set -uo pipefail
patch_file=$(realpath "${1:?usage: cpu_decode6_check.sh PATCH}")
rounds=${ROUNDS:-3}
. "$(dirname "$0")/common.sh" decode6.txt

gen_models smollm2-135m:Q8_0 llama-1b:Q4_0 &
rm -rf /tmp/ab-new && mkdir -p /tmp/ab-new &&
  tar --exclude=./build --exclude=./.git --exclude=./.device -cf - . | tar -xf - -C /tmp/ab-new &&
  ( cd /tmp/ab-new && git apply "$patch_file" ) || { log "the patch does not apply"; exit 1; }
build_muser_cpu build-d6-old.log || exit 1
( cd /tmp/ab-new && build_muser_cpu build-d6-new.log ) || exit 1
wait; log "both built, models ready: old = this tree, new = it with $(basename "$patch_file")"
# Facts the decode cells depend on: NUMA nodes (first-touch placement of the packs), huge pages (the packs of
# 4 MB and up ask for them), the CPU model.
{ lscpu | grep -E '^(Model name|NUMA node|Thread|Core|Socket|L2|L3)'
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } 2>&1 | tee -a "$res"

cell() {  # TREE TAG ROUND MODEL STEPS GROUP_STEPS
  ( cd "$1" && PYTHONPATH="$1/src:$1/benchmarks:$lib" timeout 60 python3 -u benchmarks/bench_thread_scaling.py \
      "$w/$4.gguf" --threads 4,16 --prompt 16 --steps "$5" --group-steps "$6" 2>&1 |
      grep -E '^ +[0-9]+ \|' | sed "s/^/$2 r$3 $4 /" | tee -a "$res" )
}
# NEW_ENVS="VAR=a VAR=b": the new tree again with each setting (a patch with a knob read from the environment).
runs="old new"; for e in ${NEW_ENVS:-}; do runs="$runs $e"; done
for round in $(seq 1 "$rounds"); do
  order=$runs; [ $((round % 2)) = 0 ] && order=$(echo $runs | tr ' ' '\n' | tac | tr '\n' ' ')
  for run in $order; do
    [ "$(el)" -lt 230 ] || break 2
    tree=/tmp/ab-new; [ "$run" = old ] && tree=$root
    ( case $run in *=*) export "$run" ;; esac
      cell "$tree" "$run" "$round" smollm2-135m-Q8_0 128 64
      cell "$tree" "$run" "$round" llama-1b-Q4_0 32 16 )
  done
done
log "end (columns: threads | prefill 16 | decode tok/s | decode GB/s | 4-row tok/s | 4-row GB/s)"
