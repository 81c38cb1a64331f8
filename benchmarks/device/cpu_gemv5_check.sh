#!/usr/bin/env bash
# Issue 11, branch cpu-gemv5, on the device host's CPU (16-core Xeon), in about 4 minutes: how far a 4-row decode
# step is from a 1-row one where decode should be bandwidth-bound (llama3-8b Q4_0, 16 threads: before the branch
# 54 ms per 1-row step, 70.5 ms per 4-row step; llama.cpp's 4-sequence decode 56.3 tok/s), beside the most the
# host's cores can read per second (the ceiling of any decode step).
#   bash benchmarks/device/cpu_gemv5_check.sh
# "new" is this tree; "old" is a copy with the branch's two switches turned back (decode calls over 16 KB of
# activations in passes again, no gemv prefetch), so the A/B needs no git history. The two alternate per run.
# Run from the repository root with `.device` and $PYLIB carried, as for cpu_full_table.sh (same directories,
# so a warm machine reuses that script's models). Output: $OUT/gemv5.txt.
set -uo pipefail
. "$(dirname "$0")/common.sh" gemv5.txt

gen_models llama3-8b:Q4_0 llama-1b:Q4_0 &
old=/tmp/gemv5-old
rm -rf "$old" && mkdir -p "$old" && tar --exclude=./build --exclude=./.git --exclude=./.device -cf - . | tar -xf - -C "$old"
k=csrc/backend/cpu
sed -i 's/kOnePassActBytes = 512 \* 1024;/kOnePassActBytes = 16 * 1024;/' "$old/$k/x86_kernels_512_packed.inc"
sed -i 's/constexpr bool kPrefetch = R >= 2/constexpr bool kPrefetch = false \&\& R >= 2/' "$old/$k/x86_kernels_512_packed_gemv.inc"
made=$(( $(grep -c 'kOnePassActBytes = 16 \* 1024;' "$old/$k/x86_kernels_512_packed.inc") +
         $(grep -c 'kPrefetch = false' "$old/$k/x86_kernels_512_packed_gemv.inc") ))
[ "$made" = 3 ] || log "old side not made as meant ($made of 3 edits)"
( cd "$old" && build_muser_cpu build-gemv5-old.log ) &
build_muser_cpu build-gemv5.log || exit 1
wait; log "built both, models ready; $(grep -m1 'model name' /proc/cpuinfo)"

log "read bandwidth (benchmarks/device/read_bandwidth.c), 2 GiB"
gcc -O2 -march=native -fopenmp benchmarks/device/read_bandwidth.c -o "$w/read_bandwidth" &&
  timeout 25 "$w/read_bandwidth" 2 1,4,16 2>&1 | tee -a "$res"

run() {  # TAG TREE MODEL ARGS...
  local tag=$1 tree=$2 model=$3; shift 3
  ( cd "$tree" && PYTHONPATH="$tree/src:$tree/benchmarks:$lib" timeout 45 python3 -u benchmarks/bench_thread_scaling.py \
      "$w/$model.gguf" "$@" 2>&1 | grep -E '^ +[0-9]+ \||weights/step' | sed "s/^/$tag $model /" | tee -a "$res" )
}
for tag in new old new old; do
  [ "$(el)" -lt 200 ] || break
  tree=$root; [ "$tag" = old ] && tree=$old
  run "$tag" "$tree" llama3-8b-Q4_0 --threads 16 --prompt 16 --steps 32 --group-steps 16
done
for tag in new old; do
  [ "$(el)" -lt 215 ] || break
  tree=$root; [ "$tag" = old ] && tree=$old
  run "$tag" "$tree" llama-1b-Q4_0 --threads 16,4 --prompt 16 --steps 32 --group-steps 16
done
log "end"
