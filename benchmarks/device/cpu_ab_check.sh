#!/usr/bin/env bash
# Before/after on the device host's CPU: this checkout's muser beside an older revision's, same
# random-weight models, thread scaling at 1, 2 and 4 threads, the two builds alternating per model
# (the host's load drifts; alternating lets both meet it). For the "nothing regressed" check.
#   bash benchmarks/device/cpu_ab_check.sh OLD_REVISION [SHAPE:TYPE ...]
# The old side is checked out from the .git that travels with the tree, which can lag the working tree
# (on 2026-12-02 its HEAD was a commit from hours before): name a revision old enough to be in it.
# Run from the repository root with `.device` and $PYLIB carried, as for cpu_full_table.sh.
# Output: $OUT/ab.txt.
set -uo pipefail
old=${1:?usage: cpu_ab_check.sh OLD_REVISION [SHAPE:TYPE ...]}; shift
specs=${*:-smollm2-135m:Q4_0 llama-1b:Q4_0}
. "$(dirname "$0")/common.sh" ab.txt

gen_models $specs &
build_muser_cpu build-ab-new.log || exit 1
rm -rf /tmp/ab-old && git worktree add -f --detach /tmp/ab-old "$old" >/dev/null 2>&1 || { log "no revision $old"; exit 1; }
( cd /tmp/ab-old && build_muser_cpu build-ab-old.log ) || exit 1
wait; log "both built: new = this working tree, old = $(git -C /tmp/ab-old rev-parse --short HEAD)"

for s in $specs; do
  f="$w/${s%%:*}-${s##*:}.gguf"
  for tree in "$root" /tmp/ab-old "$root" /tmp/ab-old; do
    [ "$(el)" -lt 540 ] || break 2
    tag=new; [ "$tree" = "$root" ] || tag=old
    echo "== $tag ($s)" | tee -a "$res"
    ( cd "$tree" && PYTHONPATH="$tree/src:$lib" timeout 90 python3 -u benchmarks/bench_thread_scaling.py "$f" \
        --threads 1,2,4 --prompt 256 --steps 32 --group-steps 16 2>&1 | grep -E '^ +[0-9]+ \|' | sed "s/^/$tag /" | tee -a "$res" )
  done
done
log "end"
