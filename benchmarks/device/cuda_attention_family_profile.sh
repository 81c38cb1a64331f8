#!/usr/bin/env bash
# Where a llama3-8b Q4_0 decode step's time goes with each attention family: the tensor cores (default) and the
# scalar kernels (MUSER_CUDA_ATTENTION_MMA=0), 1 and 4 rows, dependent launch off so each kernel's time is its own
# (bench_cuda_step_profile.py, PyTorch's profiler: the device image has it):
#
#   DEADLINE=170 bash benchmarks/device/cuda_attention_family_profile.sh   (repository root; .device and $PYLIB carried)
export BENCH_MODELS="llama3-8b-Q4_0"
export DEADLINE=${DEADLINE:-230}
. "$(dirname "$0")/cuda_common.sh"
bench_models_ready
for side in mma scalar; do
  settings=""; [ $side = scalar ] && settings="MUSER_CUDA_ATTENTION_MMA=0"
  log "step profile, $side"
  env $settings MUSER_CUDA_PDL=0 timeout "$(cap 70)" python3 -u benchmarks/bench_cuda_step_profile.py \
    "$bench_dir/llama3-8b-Q4_0.gguf" --rows 1,4 --top 10 --prefill 0 2>&1 | grep -v -i warn | sed "s/^/$side /" |
    tee -a "$out/results.txt"
done
log "done, status $status"
exit $status
