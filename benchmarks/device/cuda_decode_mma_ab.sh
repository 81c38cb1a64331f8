#!/usr/bin/env bash
# The tensor-core decode matvec's switches A/B on llama3-8b Q4_0 and smollm2-135m Q4_0, decode cells only
# (bench_cuda.py --decode-only, dependent launch on): every 3..4-row launch on the tensor cores on the GGUF blocks
# where rows hold a multiple of 8 (MUSER_CUDA_DECODE_MMA_BLOCKS=1), on the packed copy only (=0), every q/k/v
# launch on the tensor cores (MUSER_CUDA_DECODE_MMA_ROPE=1; by default mid-sized ones like llama3-8b's stay on
# dp4a), every q/k/v launch on dp4a (=0), the q/k/v launch and the mid-sized matrices on dp4a (+ _MID=0),
# everything on dp4a (MUSER_CUDA_DECODE_MMA=0), then the blocks again. About 3.5 minutes with the build:
#
#   DEADLINE=200 bash benchmarks/device/cuda_decode_mma_ab.sh      (repository root; $PYLIB carried)
export BENCH_MODELS=${BENCH_MODELS:-llama3-8b-Q4_0 smollm2-135m-Q4_0}
export DEADLINE=${DEADLINE:-230}
. "$(dirname "$0")/cuda_common.sh"
bench_models_ready
for mode in "MUSER_CUDA_DECODE_MMA_BLOCKS=1" "MUSER_CUDA_DECODE_MMA_BLOCKS=0" "MUSER_CUDA_DECODE_MMA_ROPE=1" \
            "MUSER_CUDA_DECODE_MMA_ROPE=0" \
            "MUSER_CUDA_DECODE_MMA_ROPE=0 MUSER_CUDA_DECODE_MMA_MID=0" \
            "MUSER_CUDA_DECODE_MMA=0" "MUSER_CUDA_DECODE_MMA_BLOCKS=1"; do
  bench_decode 40 $mode
done
log "done, status $status"
exit $status
