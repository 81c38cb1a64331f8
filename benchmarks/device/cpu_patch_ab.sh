#!/usr/bin/env bash
# A CPU kernel change measured on the device host before it is merged: this checkout's muser ("old") beside a
# copy with PATCH applied ("new"), the two alternating (the host's load drifts; alternating lets both meet it).
#   git diff main my-branch -- csrc > .ab.patch        (untracked, so it travels with the tree)
#   bash benchmarks/device/cpu_patch_ab.sh .ab.patch [SHAPE:TYPE ...]
# Per round and tree: bench_gemv_streams.py kernel rows (1 and 4 activation rows, 1 thread, default streams),
# then decode at 4 and 16 threads (bench_thread_scaling.py) on each model. AB_NEW_ENVS="VAR=a VAR=b" runs the new
# tree once per setting (for a patch that reads a knob from the environment while it is being tuned).
# Run from the repository root with `.device` and $PYLIB carried, as for cpu_full_table.sh. Output: $OUT/ab-patch.txt.
set -uo pipefail
patch_file=$(realpath "${1:?usage: cpu_patch_ab.sh PATCH [SHAPE:TYPE ...]}"); shift
specs=${*:-llama-1b:Q4_0 llama-1b:Q4_K}
. "$(dirname "$0")/common.sh" ab-patch.txt

gen_models $specs &
rm -rf /tmp/ab-new && mkdir -p /tmp/ab-new &&
  tar --exclude=./build --exclude=./.git --exclude=./.device -cf - . | tar -xf - -C /tmp/ab-new &&
  ( cd /tmp/ab-new && git apply "$patch_file" ) || { log "the patch does not apply"; exit 1; }
build_muser_cpu build-ab-old.log || exit 1
( cd /tmp/ab-new && build_muser_cpu build-ab-new.log ) || exit 1
wait; log "both built: old = this working tree, new = it with $(basename "$patch_file") applied"

runs="old"; for e in ${AB_NEW_ENVS:-new}; do runs="$runs $e"; done
for round in 1 2; do
  for run in $runs; do
    tree=/tmp/ab-new; tag=$run; [ "$run" = old ] && tree=$root
    [ "$(el)" -lt 500 ] || break 2
    ( cd "$tree" && export PYTHONPATH="$tree/src:$tree/benchmarks:$lib"
      case $run in *=*) export "$run" ;; esac
      timeout 60 python3 -u benchmarks/bench_gemv_streams.py --types Q4_0,Q8_0,Q4_K --shapes 4096x14336,14336x4096 \
        --rows 1,4 --streams 0 --rounds 2 2>&1 | grep -E '^Q' | sed "s/^/$tag r$round kernel /" | tee -a "$res"
      for s in $specs; do
        f="$w/${s%%:*}-${s##*:}.gguf"
        timeout 60 python3 -u benchmarks/bench_thread_scaling.py "$f" --threads 4,16 --prompt 64 --steps 32 \
          --group-steps 16 2>&1 | grep -E '^ +[0-9]+ \|' | sed "s/^/$tag r$round ${s} /" | tee -a "$res"
      done )
  done
done
log "end"
